/**
 * Red team of budget.on_store_error: local and of what a replica knows about its
 * peers while the store fails. Each test is an attack: a caller or a bad moment trying to make a
 * replica admit more than its share, count or audit something other than what ran, grow memory, or
 * lose or double local units on recovery. Each pins the behaviour that must hold, among them: a
 * flapping store must not hand out a share twice, a reload away from local must not lose the
 * local units, the loop breaker must not be divided below 1, a caller's new keys must not prune a
 * shared bucket's units, and N must not fall right after an outage.
 *
 * Most tests run a real gateway whose shared store is a test double of the BudgetStore interface (the
 * interface is the point: when it fails, when a hand-over fails); the heartbeat test runs the real
 * PostgresBudgetStore on real Postgres behind a PostgresProxy the test cuts.
 */
import type { Pool } from 'pg'
import { identityKey, windowKey } from '../../src/budget/keys'
import { LocalLimiter } from '../../src/budget/local-limiter'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BucketCharge } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { closedPort } from '../e2e/raw-upstream'
import { metricSample, toolCall } from '../helpers/harness'
import { type TestDatabase, closeTestDatabase, openTestDatabase, testPool } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'
import { type BudgetHarness, startBudgetHarness } from './budget-harness'
import { DOWN, FlakyStore } from './flaky-store'

let h: BudgetHarness | null = null
let store: FlakyStore
afterEach(async () => {
  await h?.close()
  h = null
})

async function start(budget: Record<string, unknown>, config?: Record<string, unknown>): Promise<BudgetHarness> {
  h = await startBudgetHarness({
    budget: { on_store_error: 'local', ...budget },
    store: (now) => (store = new FlakyStore(now)),
    config,
  })
  return h
}

const echo = (id: number, text = 'hi') => toolCall('echo', { text }, id)

/** Statuses of `n` calls from one caller, each with its own arguments unless `same`. */
async function statuses(g: BudgetHarness, n: number, identity = 'alice', same = false): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await g.post(echo(i, same ? 'hi' : `call ${i}`), identity)).status)
  return out
}

const admitted = (s: readonly number[]): number => s.filter((x) => x === 200).length

/** The shared count of alice's identity bucket (60 s windows), as the store holds it, past its limit too. */
function sharedUsed(): number {
  const key = windowKey(identityKey('acme', 'alice'), 60)
  const limit = 1_000_000_000 // a probe that charges nothing, with a limit no count reaches, so `remaining` is not clamped
  const probe: BucketCharge = { key, kind: 'identity', name: 'alice', limit, windowSeconds: 60, cost: 0, charged: false }
  return limit - store.shared.admitNow([probe]).buckets[0].remaining
}

describe('a flapping store', () => {
  // The hand-over resets the local counter; the remembered count, read before it, includes the units
  // handed over, so the next outage does not hand out the same share again. The first shared call after
  // an outage carries the units admitted locally and is judged with them (judged before a separate
  // hand-over landed, it would be one call over here, a whole coalesced burst in general).
  test('one replica, one bucket seen right before each outage: two short outages admit the limit, not one call more', async () => {
    const g = await start({ requests_per_window: 10, window_seconds: 60 })
    const all: number[] = []
    all.push(...(await statuses(g, 1))) // shared: 1 used, remembered
    store.failing = true
    all.push(...(await statuses(g, 12))) // local: floor((10 − 1) ÷ 1) = 9
    store.failing = false
    all.push(...(await statuses(g, 1))) // shared, carrying the 9: 10 used, refused
    expect(store.handed).toHaveLength(1)
    store.failing = true
    all.push(...(await statuses(g, 12))) // remembered 10 used: nothing more
    expect(admitted(all)).toBe(10)
  })

  test('more flaps add nothing once the window is full, and the shared row counts every call that ran once', async () => {
    const g = await start({ requests_per_window: 10, window_seconds: 60 })
    let runs = admitted(await statuses(g, 1))
    for (let flap = 0; flap < 4; flap++) {
      store.failing = true
      runs += admitted(await statuses(g, 12))
      store.failing = false
      runs += admitted(await statuses(g, 1))
      // The shared call after each flap carried the flap's local units: the row holds every call that ran.
      expect(sharedUsed()).toBe(runs)
    }
    // 1 shared, 9 local, then nothing: 10, counted once each.
    expect(runs).toBe(10)
  })

  test('a check whose hand-over fails is judged locally, and the units go with the next check, counted once', async () => {
    const g = await start({ requests_per_window: 20, window_seconds: 60 })
    store.failing = true
    expect(admitted(await statuses(g, 3))).toBe(3)
    store.failing = false
    store.handOverFails = true
    expect(admitted(await statuses(g, 1))).toBe(1) // its statement fails: judged locally, 4 local units
    expect(store.handed).toHaveLength(0)
    const [entry] = (await g.audit()).filter((e) => e.method === 'tools/call').slice(-1)
    expect(entry.reason).toBe(`budget check degraded to local limit: ${DOWN}`)
    store.handOverFails = false
    expect(admitted(await statuses(g, 2))).toBe(2)
    expect(store.handed).toEqual([[{ key: windowKey(identityKey('acme', 'alice'), 60), count: 4, windowSeconds: 60 }]])
    expect(sharedUsed()).toBe(6) // 4 local + 2 shared, each once
  })
})

describe('a reload during an outage', () => {
  // An operator may switch to `open` (or `closed`) mid-outage, say because the local share refuses too
  // much: the units admitted locally must still reach the shared row, or the window admits its whole
  // limit again on top of them (the stage hands over whenever the limiter holds counts).
  test('switching local → open mid-outage still hands the local units to the store once it answers', async () => {
    const g = await start({ requests_per_window: 10, window_seconds: 60 })
    store.failing = true
    expect(admitted(await statuses(g, 4))).toBe(4)
    g.reload({ on_store_error: 'open', requests_per_window: 10, window_seconds: 60 })
    store.failing = false
    expect(admitted(await statuses(g, 1))).toBe(1)
    expect(store.handed).toHaveLength(1)
    expect(sharedUsed()).toBe(5)
  })

  test('switching open → local mid-outage starts judging locally at once, with nothing to hand over from the fail-opens', async () => {
    const g = await start({ on_store_error: 'open', requests_per_window: 4, window_seconds: 60 })
    store.failing = true
    expect(admitted(await statuses(g, 3))).toBe(3) // failed open: not counted anywhere
    g.reload({ on_store_error: 'local', requests_per_window: 4, window_seconds: 60 })
    expect(await statuses(g, 5)).toEqual([200, 200, 200, 200, 429])
    store.failing = false
    await statuses(g, 1)
    expect(store.handed).toHaveLength(1)
    expect(store.handed[0][0].count).toBe(4)
  })
})

describe('the loop breaker while degraded', () => {
  // The repeat bucket is not divided by N (local-limiter.ts): divided, a repeat_limit.calls below the
  // live replicas (3 on 4) left it 0, and since it applies to every tools/call every call was refused
  // while the database was away, audited as `repeated call ... more than 3 times` for a call made once.
  test('a call made for the first time is not refused as a repeated call (repeat_limit.calls 3, 4 replicas)', async () => {
    const g = await start({ requests_per_window: 100, window_seconds: 60, repeat_limit: { calls: 3, window_seconds: 60 } })
    store.replicas = 4
    store.failing = true
    expect(await statuses(g, 3)).toEqual([200, 200, 200]) // three different argument sets
    const entries = (await g.audit()).filter((e) => e.method === 'tools/call')
    expect(entries[0].reason).toBe(`budget check degraded to local limit: ${DOWN}`)
  })

  test('it still breaks a loop locally, at its whole limit on each replica', async () => {
    const g = await start({ requests_per_window: 100, window_seconds: 60, repeat_limit: { calls: 4, window_seconds: 60 } })
    store.replicas = 2
    store.failing = true
    expect(await statuses(g, 5, 'alice', true)).toEqual([200, 200, 200, 200, 429])
    const entries = (await g.audit()).filter((e) => e.method === 'tools/call')
    expect(entries[4].reason).toBe(
      `repeated call: "echo" with the same arguments more than 4 times in 60s (budget.repeat_limit); budget check degraded to local limit: ${DOWN}`,
    )
  })
})

describe('headers and Retry-After while degraded', () => {
  test('a remembered bucket resets when the shared window ends: Retry-After and t are the shared window’s rest, not a full window', async () => {
    const g = await start({ requests_per_window: 6, window_seconds: 60 })
    store.replicas = 2
    expect((await g.post(echo(1))).status).toBe(200)
    g.advance(50) // the shared window has 10 s left
    const shared = await g.post(echo(2))
    expect(shared.headers.get('ratelimit')).toBe('"identity";r=4;t=10')
    store.failing = true
    const replies = []
    for (let i = 0; i < 3; i++) replies.push(await g.post(echo(3 + i)))
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429]) // floor((6 − 2) ÷ 2)
    expect(replies[0].headers.get('ratelimit')).toBe('"identity";r=1;t=10')
    expect(replies[2].headers.get('retry-after')).toBe('10')
    expect(replies[2].json).toMatchObject({ error: { code: 429, data: { retry_after_seconds: 10, bucket: 'identity' } } })
  })

  test('a caller cannot buy more than its share with a batch: the batch is refused whole and takes nothing', async () => {
    const g = await start({ requests_per_window: 10, window_seconds: 60 })
    store.replicas = 2
    store.failing = true
    const batch = [echo(1, 'a'), echo(2, 'b'), echo(3, 'c'), echo(4, 'd'), echo(5, 'e'), echo(6, 'f')]
    expect((await g.post(batch)).status).toBe(429)
    expect(await statuses(g, 6)).toEqual([200, 200, 200, 200, 200, 429])
  })
})

describe('the audit trail of degraded calls', () => {
  test('a degraded call the MCP server never served: one entry each, refunded locally, the metric agrees', async () => {
    const port = await closedPort()
    const g = await start({ requests_per_window: 3, window_seconds: 60 }, { upstream: `http://127.0.0.1:${port}` })
    store.failing = true
    // Four where this replica allows three: each one refunded, so none is refused.
    expect(await statuses(g, 4, 'carol')).toEqual([502, 502, 502, 502])
    const entries = (await g.audit()).filter((e) => e.method === 'tools/call')
    expect(entries).toHaveLength(4)
    expect(new Set(entries.map((e) => e.request_id)).size).toBe(4)
    for (const e of entries)
      expect(e.reason).toMatch(/budget check degraded to local limit: .*; budget refunded: the call never reached the MCP server/)
    expect(await metricSample(g.url, 'wardline_budget_degraded_total')).toBe(4)
  })

  test('admitted, throttled and batch: one entry per call, the metric one per check', async () => {
    const g = await start({ requests_per_window: 3, window_seconds: 60 })
    store.failing = true
    await statuses(g, 4)
    await g.post([echo(10, 'x'), echo(11, 'y')], 'bob')
    const entries = (await g.audit()).filter((e) => e.method === 'tools/call')
    expect(entries).toHaveLength(6) // a batch's calls get an entry each (<request id>/<index>)
    expect(new Set(entries.map((e) => e.request_id)).size).toBe(6)
    for (const e of entries) expect(e.reason).toContain(`budget check degraded to local limit: ${DOWN}`)
    expect(entries.map((e) => e.decision)).toEqual(['allow', 'allow', 'allow', 'throttled', 'allow', 'allow'])
    expect(await metricSample(g.url, 'wardline_budget_degraded_total')).toBe(5) // the batch is one check
  })
})

describe('memory with keys a caller controls', () => {
  const charge = (key: string, kind: BucketCharge['kind'], limit = 1_000_000): BucketCharge => ({
    key,
    kind,
    name: key,
    limit,
    windowSeconds: 60,
    cost: 1,
    charged: true,
  })

  test('remembered counts and the ledger stay at their cap however many repeat keys (arguments) one caller makes', () => {
    const limiter = new LocalLimiter({ maxKeys: 100 })
    const tool = charge('tool', 'tool')
    const me = charge('me', 'identity')
    for (let i = 0; i < 5000; i++) {
      const charges = [charge(`repeat ${i}`, 'repeat'), tool, me]
      const shared = new MemoryBudgetStore().admitNow(charges)
      limiter.remember(charges, shared)
      limiter.admit(charges, 1)
    }
    expect(limiter.seedCount).toBeLessThanOrEqual(100)
    expect((limiter as unknown as { pending: Map<string, unknown> }).pending.size).toBeLessThanOrEqual(100)
  })

  // The ledger of units to hand over is pruned oldest-first when full, and a busy bucket's entry is
  // the oldest (an increment does not move it). Pruned blindly, one caller making new repeat keys (new
  // arguments each call) or new identities would drop the tool bucket's units, which every caller
  // shares; identity and repeat entries now go first. Shown at a cap of 10; in the gateway it is 100 000.
  test('new keys from one caller do not make the shared tool bucket lose the units it admitted locally', () => {
    const limiter = new LocalLimiter({ maxKeys: 10 })
    const tool = charge('tool', 'tool')
    const me = charge('me', 'identity')
    for (let i = 0; i < 30; i++) limiter.admit([charge(`repeat ${i}`, 'repeat'), tool, me], 1)
    const handed = limiter.take([], Infinity)
    expect(handed?.find((c) => c.key === 'tool')?.count).toBe(30)
  })
})

describe('N after the database comes back (real Postgres behind a proxy)', () => {
  let db: TestDatabase
  let admin: Pool
  let proxy: PostgresProxy
  let storePool: Pool
  let pg: PostgresBudgetStore | null = null
  let otherBeats: NodeJS.Timeout | null = null
  beforeAll(async () => {
    ;({ db, pool: admin } = await openTestDatabase(2))
    await migrate(admin, silentLogger())
    proxy = await PostgresProxy.start(db.url)
    storePool = testPool(proxy.urlFor(db.url), 4)
  })
  afterAll(async () => {
    if (otherBeats !== null) clearInterval(otherBeats)
    await h?.close()
    h = null
    await pg?.close()
    await storePool.end()
    await proxy.close()
    await closeTestDatabase({ db, pool: admin })
  })

  const beatOther = (): Promise<unknown> =>
    admin.query(
      `INSERT INTO wardline_replicas (replica_id, heartbeat_at) VALUES ('other', clock_timestamp())
       ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`,
    )

  // Every replica's beats fail during an outage, so once it is longer than 3 intervals every row is
  // stale, and the first replica to beat afterwards would count only itself: a new failure in the next
  // interval would have it enforce the whole limit instead of limit ÷ 2. After a failed beat, the count
  // may only rise for 3 beats (heartbeat.ts).
  test('a replica whose first beat after an outage finds its peer not yet beaten still counts the peer', async () => {
    await beatOther()
    otherBeats = setInterval(() => void beatOther().catch(() => undefined), 50)
    pg = new PostgresBudgetStore(storePool, { checkTimeoutMs: 2000, heartbeatIntervalMs: 100 })
    await pg.start()
    const store = pg
    await waitFor(() => store.liveReplicas() === 2, { what: 'two live replicas' })
    const g = (h = await startBudgetHarness({
      budget: { on_store_error: 'local', requests_per_window: 10, window_seconds: 60, check_timeout_seconds: 2 },
      store,
    }))
    // The outage: neither replica reaches the database for longer than 3 beats (0.3 s here).
    proxy.refuse()
    clearInterval(otherBeats)
    otherBeats = null
    // The outage's length is the scenario (twice the 3 beats after which a peer counts as gone), not a wait for an event.
    await new Promise((r) => setTimeout(r, 600))
    expect(store.liveReplicas()).toBe(2) // failed beats keep the last count
    // The database is back; this replica beats before its peer does (a matter of where each is in its interval).
    const back = (await admin.query<{ at: Date }>('SELECT clock_timestamp() AS at')).rows[0].at
    proxy.allow()
    await waitFor(
      async () =>
        (await admin.query("SELECT 1 FROM wardline_replicas WHERE replica_id <> 'other' AND heartbeat_at > $1", [back])).rowCount === 1,
      { what: "this replica's first beat after the outage", intervalMs: 20 },
    )
    // Its answer reaching the store: the beat still in flight (none once it was handled) settles when it has.
    await (store as unknown as { heartbeat: { beating: Promise<void> | null } }).heartbeat.beating
    // And fails again before the next beat that would fix it: a fresh caller gets this replica's share.
    proxy.refuse()
    const s = await statuses(g, 12, 'mallory')
    expect(admitted(s)).toBeLessThanOrEqual(5) // floor(10 ÷ 2)
  })
})
