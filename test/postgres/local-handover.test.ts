/**
 * The hand-over of units admitted locally (budget.on_store_error: local) when the database returns
 * A real gateway on a real PostgresBudgetStore behind a PostgresProxy the test cuts.
 *
 * The attack: a tenant limited to 200 has half its window used, the database goes away, the replica
 * admits its share of the rest locally, and when the database comes back the first burst of
 * concurrent calls is coalesced into one statement. Judged against a shared row that does not yet
 * hold the local units (a hand-over in a second statement, sent after that first verdict), the window
 * ended at 292–302 of 200. The local units travel in the statement that judges the first checks
 * after the outage, so the window ends at its limit.
 */
import type { Pool } from 'pg'
import { identityKey, tenantKey, windowKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { bucket } from '../budget/store-contract'
import { HandOverLedger, countOf, holdRow, lockWaits } from '../helpers/budget-rows'
import { toolCall } from '../helpers/harness'
import { type TestDatabase, closeTestDatabase, openTestDatabase, testPool } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { type BudgetHarness, startBudgetHarness } from '../budget/budget-harness'
import { waitFor } from '../helpers/wait'

const TENANT_LIMIT = 200
const WINDOW_SECONDS = 600

let db: TestDatabase
let admin: Pool
let proxy: PostgresProxy
let storePool: Pool
let store: PostgresBudgetStore | null = null
let h: BudgetHarness | null = null

beforeAll(async () => {
  ;({ db, pool: admin } = await openTestDatabase(2))
  await migrate(admin, silentLogger())
  proxy = await PostgresProxy.start(db.url)
}, 30_000)

beforeEach(async () => {
  await admin.query('DELETE FROM budget_buckets')
  await admin.query('DELETE FROM wardline_replicas')
  proxy.allow()
  storePool = testPool(proxy.urlFor(db.url), 4)
  store = new PostgresBudgetStore(storePool, { checkTimeoutMs: 3000, log: silentLogger() })
  await store.start()
  h = await startBudgetHarness({
    budget: {
      on_store_error: 'local',
      check_timeout_seconds: 3,
      // Identities never refuse here: the tenant bucket is the one every caller shares.
      requests_per_window: 100_000,
      window_seconds: WINDOW_SECONDS,
      tenants: { acme: { requests_per_window: TENANT_LIMIT, window_seconds: WINDOW_SECONDS } },
    },
    store,
  })
})

afterEach(async () => {
  await h?.close()
  h = null
  await store?.close()
  store = null
  await storePool.end()
})

afterAll(async () => {
  await proxy.close()
  await closeTestDatabase({ db, pool: admin })
})

/** `n` calls of tenant acme, each from its own identity, all sent at once: how many were admitted. */
async function burst(g: BudgetHarness, n: number, tag: string): Promise<number> {
  const replies = await Promise.all(
    Array.from({ length: n }, (_, i) => g.post(toolCall('echo', { text: `${tag} ${i}` }, i), `${tag}-${i}`, 'acme')),
  )
  expect(replies.every((r) => r.status === 200 || r.status === 429)).toBe(true)
  return replies.filter((r) => r.status === 200).length
}

/** The same, one call after the other. */
async function oneByOne(g: BudgetHarness, n: number, tag: string): Promise<number> {
  let admitted = 0
  for (let i = 0; i < n; i++) {
    const r = await g.post(toolCall('echo', { text: `${tag} ${i}` }, i), `${tag}-${i}`, 'acme')
    expect([200, 429]).toContain(r.status)
    if (r.status === 200) admitted++
  }
  return admitted
}

async function sharedTenantCount(): Promise<number> {
  const key = windowKey(tenantKey('acme'), WINDOW_SECONDS)
  const r = await admin.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1 AND ends_at > clock_timestamp()', [key])
  return r.rows[0]?.count ?? 0
}

test('a burst of concurrent calls right after the database returns is judged with the units admitted locally: the window ends at its limit', async () => {
  const g = h as BudgetHarness
  const before = await oneByOne(g, TENANT_LIMIT / 2, 'before')
  expect(before).toBe(TENANT_LIMIT / 2)
  proxy.refuse()
  // One replica: its local share is the rest of the window it remembers, floor((200 − 100) ÷ 1).
  const local = await oneByOne(g, 60, 'down-a')
  const local2 = await burst(g, 60, 'down-b')
  expect(local + local2).toBe(TENANT_LIMIT / 2)
  proxy.allow()
  const after = await burst(g, 150, 'after')
  const total = before + local + local2 + after
  expect({ total, after }).toEqual({ total: TENANT_LIMIT, after: 0 })
  // Every call that ran is in the shared row, once.
  expect(await sharedTenantCount()).toBe(TENANT_LIMIT)
  // And nothing more gets through later.
  expect(await burst(g, 20, 'later')).toBe(0)
}, 60_000)

test('units admitted locally with room left: the burst after the outage gets exactly the rest', async () => {
  const g = h as BudgetHarness
  expect(await oneByOne(g, 50, 'before')).toBe(50)
  proxy.refuse()
  expect(await burst(g, 30, 'down')).toBe(30)
  proxy.allow()
  // 50 shared + 30 local: 120 left, whatever the burst's size and however it is batched.
  expect(await burst(g, 200, 'after')).toBe(TENANT_LIMIT - 80)
  expect(await sharedTenantCount()).toBe(TENANT_LIMIT)
}, 60_000)

test('a replica that gets no call once the database is back still hands its local units over, within seconds', async () => {
  // Its units must not wait for its next call: the other replicas judge on the shared rows meanwhile.
  const g = h as BudgetHarness
  proxy.refuse()
  expect(await oneByOne(g, 5, 'idle')).toBe(5)
  proxy.allow()
  await waitFor(async () => (await sharedTenantCount()) === 5, { what: 'the local units in the shared row', timeoutMs: 15_000 })
}, 30_000)

test('a verdict judged before a check this replica admitted locally meanwhile is not given, and is refunded (the stage then judges the check locally)', async () => {
  // A held network: the statement reaches the database only after this replica judged another check
  // locally (its own bound passed), so the shared count it is judged on lacks that unit.
  const pg = store as PostgresBudgetStore
  const ledger = new HandOverLedger()
  const held = bucket(identityKey('acme', 'held'), 10)
  const sent = pg.stats().statements
  proxy.pause()
  const verdict = pg.admit([held], 3000, ledger)
  await waitFor(() => pg.stats().statements === sent + 1, { what: 'the statement to be sent' })
  ledger.localAdmissions++
  proxy.resume()
  await expect(verdict).rejects.toThrow('judged without calls this replica admitted locally meanwhile')
  // Committed on the database, then taken back.
  await waitFor(async () => (await countOf(admin, held.key)) === 0, { what: 'the refund of the verdict not given' })
  // A statement sent after it is exact again.
  expect((await pg.admit([held], 3000, ledger)).admitted).toBe(true)
  expect(await countOf(admin, held.key)).toBe(1)
}, 30_000)

test('while a statement carrying local units is in flight, no other starts beside it, even once it counts as stalled', async () => {
  // Beside it, a check would be judged on rows that may not hold the units yet.
  const pg = store as PostgresBudgetStore
  const ledger = new HandOverLedger()
  ledger.add([{ key: 'carried-while-held', count: 3, windowSeconds: 60 }])
  // Someone holds the row the hand-over adds to: the carrying statement waits for its lock.
  const release = await holdRow(admin, 'carried-while-held')
  try {
    const sent = pg.stats().statements
    const carrier = pg.admit([bucket(identityKey('acme', 'first'), 10)], 5000, ledger)
    await waitFor(async () => (await lockWaits(admin)) > 0, { what: 'the carrying statement to wait for the lock', intervalMs: 5 })
    let besideSettled = false
    const beside = pg.admit([bucket(identityKey('acme', 'second'), 10)], 5000, ledger).finally(() => (besideSettled = true))
    // Three times the 200 ms after which a statement counts as stalled and another may start beside it.
    await new Promise((resolve) => setTimeout(resolve, 600))
    expect(pg.stats().statements).toBe(sent + 1)
    expect(besideSettled).toBe(false)
    await release()
    expect((await carrier).admitted).toBe(true)
    expect((await beside).admitted).toBe(true)
    expect(ledger.landedUnits).toEqual(new Map([['carried-while-held', 3]]))
    expect(await countOf(admin, 'carried-while-held')).toBe(3)
  } finally {
    await release()
  }
}, 30_000)
