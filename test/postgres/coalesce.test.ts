import type { Pool } from 'pg'
import { identityKey, tenantKey, toolKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BucketCharge } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { ReplicaHeartbeat } from '../../src/postgres/heartbeat'
import { migrate } from '../../src/postgres/migrate'
import { bucket } from '../budget/store-contract'
import { closeTestDatabase, openTestDatabase, type TestDatabase, testPool } from '../helpers/postgres'
import { HandOverLedger, countOf, holdRow, lockWaits } from '../helpers/budget-rows'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

/** Coalesced admission (migrations/004-coalesced-admission.ts): many checks, one statement, each judged alone. */

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(20))
  await migrate(pool, silentLogger())
})

afterAll(() => closeTestDatabase({ db, pool }))

beforeEach(async () => {
  await pool.query('TRUNCATE budget_buckets')
})

test('checks that arrive while a statement is in flight share the next one, in arrival order, each all or nothing', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, maxStatements: 1 })
  const alice = bucket(identityKey('acme', 'alice'), 5)
  // One statement at a time: the first check goes alone, the nine after it wait and share the next.
  const results = await Promise.all(Array.from({ length: 10 }, () => store.admit([alice])))
  expect(results.map((r) => r.admitted)).toEqual([true, true, true, true, true, false, false, false, false, false])
  expect(results.map((r) => r.buckets[0].remaining)).toEqual([4, 3, 2, 1, 0, 0, 0, 0, 0, 0])
  expect(store.stats()).toEqual({ checks: 10, statements: 2 })
  expect(await countOf(pool, alice.key)).toBe(5)
})

test('a refused check in a batch charges nothing, and the checks after it see the counts it left alone', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, maxStatements: 1 })
  const tool = bucket(toolKey('search'), 1)
  const alice = bucket(identityKey('acme', 'alice'), 2)
  const bob = bucket(identityKey('acme', 'bob'), 5)
  const probe = bucket(tenantKey('acme'), 1, { charged: false })
  const first = store.admit([bob]) // in flight alone; the rest are one batch
  const batch = [
    store.admit([tool, alice]), // admitted: tool 1/1, alice 1/2
    store.admit([tool, alice]), // refused by the tool: alice stays at 1
    store.admit([alice]), // admitted: alice 2/2
    store.admit([probe, bob]), // checked only on the tenant: it stays at 0
    store.admit([probe, bob]),
  ]
  expect((await first).admitted).toBe(true)
  const r = await Promise.all(batch)
  expect(r.map((x) => x.admitted)).toEqual([true, false, true, true, true])
  expect(r[1].refusedBy).toBe(0)
  expect(r[1].buckets.map((b) => b.remaining)).toEqual([0, 1]) // the counts it was judged on
  expect(r[2].buckets[0].remaining).toBe(0)
  expect(r[4].buckets.map((b) => b.remaining)).toEqual([1, 2])
  expect(store.stats().statements).toBe(2)
  expect(await countOf(pool, tool.key)).toBe(1)
  expect(await countOf(pool, alice.key)).toBe(2)
  expect(await countOf(pool, bob.key)).toBe(3)
  expect(await countOf(pool, probe.key)).toBe(0)
})

test('a spike of 500 callers over 20 identities on 4 connections: no check fails, counts exact, far fewer round trips than checks', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const small = testPool(proxy.urlFor(db.url), 4)
  try {
    const store = new PostgresBudgetStore(small, { checkTimeoutMs: 5000 })
    await store.calibrate()
    const before = proxy.roundTrips
    const identities = Array.from({ length: 20 }, (_, i) => bucket(identityKey('acme', `user-${i}`), 20))
    const tool = bucket(toolKey('search'), 1_000_000)
    // 25 calls per identity, all at once: 20 of each are admitted, whatever order they arrive in.
    const outcomes = await Promise.allSettled(Array.from({ length: 500 }, (_, i) => store.admit([tool, identities[i % 20]])))
    expect(outcomes.filter((o) => o.status === 'rejected')).toEqual([])
    const admitted = outcomes.filter((o) => o.status === 'fulfilled' && o.value.admitted).length
    expect(admitted).toBe(400)
    for (const id of identities) expect(await countOf(pool, id.key)).toBe(20)
    expect(await countOf(pool, tool.key)).toBe(400)
    const { checks, statements } = store.stats()
    expect(checks).toBe(500)
    expect(statements).toBeLessThan(50)
    expect(proxy.roundTrips - before).toBe(statements)
  } finally {
    await small.end()
    await proxy.close()
  }
})

test('two replicas sending batches over the same new keys in opposite orders never deadlock and stay exact', async () => {
  const other = testPool(db.url, 4)
  try {
    const stores = [new PostgresBudgetStore(pool, { checkTimeoutMs: 10_000 }), new PostgresBudgetStore(other, { checkTimeoutMs: 10_000 })]
    const keys = Array.from({ length: 12 }, (_, i) => bucket(tenantKey(`t${i}`), 1000))
    let admitted = 0
    const errors: string[] = []
    await Promise.all(
      Array.from({ length: 600 }, async (_, i) => {
        // Every check takes three keys, in an order that differs between checks: first sightings
        // (placeholder rows created in the statement) and existing rows mixed, as in a spike of new callers.
        const a = keys[i % 12]
        const b = keys[(i * 5 + 3) % 12]
        const c = keys[(i * 7 + 1) % 12]
        const charges: BucketCharge[] = [...new Map([a, b, c].map((x) => [x.key, x])).values()]
        try {
          if ((await stores[i % 2].admit(i % 3 === 0 ? charges.reverse() : charges)).admitted) admitted++
        } catch (err) {
          errors.push((err as Error).message)
        }
      }),
    )
    expect(errors).toEqual([])
    expect(admitted).toBe(600)
    const total = (await pool.query<{ n: number }>('SELECT sum(count)::int AS n FROM budget_buckets')).rows[0].n
    const expected = Array.from({ length: 600 }, (_, i) => new Set([i % 12, (i * 5 + 3) % 12, (i * 7 + 1) % 12]).size).reduce(
      (x, y) => x + y,
    )
    expect(total).toBe(expected)
  } finally {
    await other.end()
  }
})

test('a check whose deadline passes in a batch waiting on a lock charges nothing; the others in it are judged and charged', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, maxStatements: 1 })
  const hot = bucket(toolKey('hot'), 100)
  const release = await holdRow(pool, hot.key)
  let short: Promise<unknown>
  let long: Promise<unknown>
  try {
    const opener = store.admit([hot], 3000) // in flight, waiting on the lock
    await waitFor(async () => (await lockWaits(pool)) > 0, { what: 'the lock wait', intervalMs: 5 })
    // Both wait for the next statement; the short one gives up before the lock is released.
    short = store.admit([hot], 150).then(
      () => 'verdict',
      (err: Error) => err.message,
    )
    long = store.admit([hot], 4000)
    await expect(short).resolves.toMatch(/no budget verdict/)
    await release()
    expect((await opener).admitted).toBe(true)
    expect(((await long) as { admitted: boolean }).admitted).toBe(true)
  } catch (err) {
    await release().catch(() => undefined)
    throw err
  }
  await store.close()
  expect(await countOf(pool, hot.key)).toBe(2) // the opener and the long one: never the one that gave up
})

test('a check given up on inside a statement gets no verdict there and is never charged, even if the statement commits', async () => {
  let refunded = 0
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, maxStatements: 1, onRefunded: () => refunded++ })
  const hot = bucket(toolKey('hot'), 100)
  const gate = bucket(toolKey('gate'), 100)
  const releaseHot = await holdRow(pool, hot.key)
  const releaseGate = await holdRow(pool, gate.key)
  try {
    // The opener holds the one statement slot (waiting on `gate`), so the next two checks share one statement.
    const opener = store.admit([gate])
    await waitFor(async () => (await lockWaits(pool)) > 0, { what: 'the opener to wait', intervalMs: 5 })
    const createdAt = performance.now()
    const both = [store.admit([hot], 800), store.admit([hot], 4000)].map((p) =>
      p.then(
        (r) => r.admitted,
        (err: Error) => err.message,
      ),
    )
    await releaseGate()
    expect((await opener).admitted).toBe(true)
    // Now both wait on `hot` in one statement; hold it past the short check's deadline, on the database too.
    await waitFor(async () => (await lockWaits(pool)) > 0, { what: 'the batch to wait', intervalMs: 5 })
    await new Promise((r) => setTimeout(r, Math.max(0, 900 - (performance.now() - createdAt))))
    await releaseHot()
    const [short, long] = await Promise.all(both)
    expect(short).toMatch(/no budget verdict/)
    expect(long).toBe(true)
    expect(store.stats().statements).toBe(2)
  } catch (err) {
    await releaseGate().catch(() => undefined)
    await releaseHot().catch(() => undefined)
    throw err
  }
  await store.close()
  // The database gave the late check no verdict (refused_by -2), so there was nothing to refund either.
  expect(refunded).toBe(0)
  expect(await countOf(pool, hot.key)).toBe(1)
})

test('a statement stuck on a row lock someone holds does not hold the checks behind it that need other rows', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, maxStatements: 2 })
  const stuck = bucket(toolKey('stuck'), 100)
  const release = await holdRow(pool, stuck.key)
  try {
    const waiting = store.admit([stuck])
    await waitFor(async () => (await lockWaits(pool)) > 0, { what: 'the lock wait', intervalMs: 5 })
    // Arrives while the stuck statement is the only one in flight: a second starts once it counts as stalled.
    const other = await store.admit([bucket(identityKey('acme', 'bob'), 10)])
    expect(other.admitted).toBe(true)
    await release()
    expect((await waiting).admitted).toBe(true)
    expect(store.stats()).toEqual({ checks: 2, statements: 2 })
  } catch (err) {
    await release().catch(() => undefined)
    throw err
  }
})

test('a check carrying local units adds them before it is judged, to an open window or one they open, whatever the limit', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
  const open = bucket(identityKey('acme', 'alice'), 3)
  await store.admit([open])
  await pool.query("INSERT INTO budget_buckets (key, count, ends_at) VALUES ('expired', 7, now() - interval '1 second')")
  const ledger = new HandOverLedger()
  ledger.add([
    { key: open.key, count: 4, windowSeconds: 60 },
    { key: 'new', count: 2, windowSeconds: 30 },
    { key: 'expired', count: 1, windowSeconds: 30 },
    { key: 'new', count: 1, windowSeconds: 30 }, // the same key twice is one count: added up
  ])
  // Judged on 1 + 4 of 3: refused, though the statement committed the units.
  const r = await store.admit([open], 5000, ledger)
  expect(r).toMatchObject({ admitted: false, refusedBy: 0, buckets: [{ remaining: 0 }] })
  expect(ledger.landedUnits).toEqual(
    new Map([
      [open.key, 4],
      ['new', 3],
      ['expired', 1],
    ]),
  )
  expect(await countOf(pool, open.key)).toBe(5) // over its limit: the calls ran, the window is full until it ends
  expect(await countOf(pool, 'new')).toBe(3)
  expect(await countOf(pool, 'expired')).toBe(1)
  const rows = await pool.query<{ key: string; secs: number }>(
    "SELECT key, extract(epoch FROM ends_at - now())::float8 AS secs FROM budget_buckets WHERE key IN ('new', 'expired')",
  )
  for (const row of rows.rows) expect(row.secs).toBeGreaterThan(25)
  // The hand-over went with the check: no statement of its own, and none taken twice.
  expect(store.stats()).toEqual({ checks: 2, statements: 2 })
  expect(ledger.takes).toBe(1)
  expect((await store.admit([bucket('new', 100)])).buckets[0].remaining).toBe(96)
})

test('the units a failed statement carried go with the next one, counted once', async () => {
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
  const ledger = new HandOverLedger()
  ledger.add([{ key: 'carried-once', count: 5, windowSeconds: 60 }])
  // A statement the database refuses (a key no text column can hold; keys.ts never makes one).
  await expect(store.admit([bucket('bro\0ken', 10)], 5000, ledger)).rejects.toThrow()
  expect(ledger.landedUnits.size).toBe(0)
  expect(await countOf(pool, 'carried-once')).toBeNull()
  expect((await store.admit([bucket('carried-once', 10)], 5000, ledger)).buckets[0].remaining).toBe(4)
  expect(ledger.landedUnits).toEqual(new Map([['carried-once', 5]]))
})

test('replicas count each other by heartbeat; one that stops beating stops counting, one that closes leaves at once', async () => {
  await pool.query('TRUNCATE wardline_replicas')
  const a = new ReplicaHeartbeat(pool, { intervalMs: 100, replicaId: 'a' })
  const b = new ReplicaHeartbeat(pool, { intervalMs: 100, replicaId: 'b' })
  const c = new ReplicaHeartbeat(pool, { intervalMs: 100, replicaId: 'c' })
  expect(a.liveReplicas()).toBe(1) // before any beat
  await a.start()
  await b.start()
  await c.beat() // beats once and never again, as a replica that was killed
  await a.beat()
  expect(a.liveReplicas()).toBe(3)
  // c's last beat is older than three intervals soon: a stops counting it.
  await waitFor(
    async () => {
      await a.beat()
      return a.liveReplicas() === 2
    },
    { what: 'the silent replica to drop out', intervalMs: 50 },
  )
  await b.close()
  await a.beat()
  expect(a.liveReplicas()).toBe(1)
  expect((await pool.query<{ id: string }>('SELECT replica_id AS id FROM wardline_replicas ORDER BY 1')).rows.map((r) => r.id)).toEqual([
    'a',
    'c',
  ])
  await a.close()
})

test('a failing heartbeat keeps the last count', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const viaProxy = testPool(proxy.urlFor(db.url), 1, { connectionTimeoutMillis: 500 })
  try {
    await pool.query('TRUNCATE wardline_replicas')
    await pool.query("INSERT INTO wardline_replicas (replica_id, heartbeat_at) VALUES ('other', clock_timestamp() + interval '1 hour')")
    const hb = new ReplicaHeartbeat(viaProxy, { intervalMs: 60_000, replicaId: 'me' })
    await hb.beat()
    expect(hb.liveReplicas()).toBe(2)
    proxy.refuse()
    await hb.beat()
    expect(hb.liveReplicas()).toBe(2)
    await hb.close()
  } finally {
    await viaProxy.end()
    await proxy.close()
  }
})
