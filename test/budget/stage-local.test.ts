/**
 * budget.on_store_error: local seen from outside: a real gateway whose budget store fails on demand
 * (a test double of the BudgetStore interface around a real MemoryBudgetStore, standing in for the
 * shared Postgres store), judging calls at limit ÷ live replicas while it fails.
 */
import type { Pool } from 'pg'
import { identityKey, windowKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BudgetStore } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { closedPort } from '../e2e/raw-upstream'
import { metricSample, toolCall } from '../helpers/harness'
import { type TestDatabase, closeTestDatabase, openTestDatabase, testPool } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { type BudgetHarness, startBudgetHarness } from './budget-harness'
import { DOWN, FlakyStore } from './flaky-store'

let h: BudgetHarness
let store: FlakyStore
afterEach(async () => {
  await h.close()
})

async function start(budget: Record<string, unknown>, config?: Record<string, unknown>): Promise<void> {
  h = await startBudgetHarness({
    budget: { on_store_error: 'local', ...budget },
    store: (now) => (store = new FlakyStore(now)),
    config,
  })
}

const echo = (id = 1) => toolCall('echo', { text: 'hi' }, id)

async function readyz(): Promise<Record<string, unknown>> {
  return (await (await fetch(`${h.url}/readyz`)).json()) as Record<string, unknown>
}

describe('while the store fails', () => {
  test('each call is judged at limit ÷ live replicas: admitted with the degraded reason, then 429 with the usual one and the cause', async () => {
    await start({ requests_per_window: 6, window_seconds: 60 })
    store.failing = true
    store.replicas = 3
    const replies = []
    for (let i = 0; i < 3; i++) replies.push(await h.post(echo(i)))
    expect(replies.map((r) => r.status)).toEqual([200, 200, 429])
    // The same RateLimit fields and 429 as a shared verdict, counted against this replica's share.
    expect(replies[0].headers.get('ratelimit-policy')).toBe('"identity";q=6;w=60')
    expect(replies[0].headers.get('ratelimit')).toBe('"identity";r=1;t=60')
    expect(replies[2].headers.get('retry-after')).toBe('60')
    expect(replies[2].json).toMatchObject({ error: { code: 429, data: { bucket: 'identity' } } })

    const entries = (await h.audit()).filter((e) => e.method === 'tools/call')
    const why = `budget check degraded to local limit: ${DOWN}`
    expect(entries.map((e) => [e.decision, e.reason])).toEqual([
      ['allow', why],
      ['allow', why],
      ['throttled', `rate limit exceeded: identity bucket, 6 requests per 60s window; ${why}`],
    ])
    expect(await metricSample(h.url, 'wardline_budget_degraded_total')).toBe(3)
    expect(await metricSample(h.url, 'wardline_budget_store_errors_total')).toBe(3)
    expect(await metricSample(h.url, 'wardline_budget_fail_open_total')).toBe(0)
    const warnings = h.logs.filter((l) => l.level === 'warn' && String(l.message).includes('locally'))
    expect(warnings).toHaveLength(1) // rate-limited, not one per call
    expect(warnings[0]).toMatchObject({ error: DOWN, live_replicas: 3 })
    expect(await readyz()).toMatchObject({
      status: 'ready',
      budget_store: 'degraded',
      budget_degraded_checks_last_minute: 3,
      budget_fail_opens_last_minute: 0,
    })
  })

  test('a bucket the shared store saw starts from its count then: floor((limit − used) ÷ replicas)', async () => {
    await start({ requests_per_window: 10, window_seconds: 60 })
    store.replicas = 2
    for (let i = 0; i < 6; i++) expect((await h.post(echo(i))).status).toBe(200)
    store.failing = true
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push((await h.post(echo(i))).status)
    expect(statuses).toEqual([200, 200, 429, 429])
  })

  test('every tier is judged, in order, all or nothing: a full tenant refuses and the identity keeps its units', async () => {
    await start({ requests_per_window: 4, window_seconds: 60, tenants: { acme: { requests_per_window: 2, window_seconds: 60 } } })
    store.failing = true
    expect((await h.post(echo(1), 'alice')).status).toBe(200)
    expect((await h.post(echo(2), 'bob')).status).toBe(200)
    const refused = await h.post(echo(3), 'alice')
    expect(refused.status).toBe(429)
    expect(refused.json).toMatchObject({ error: { data: { bucket: 'tenant' } } })
    expect((await h.post(echo(4), 'alice', 'other')).headers.get('ratelimit')).toBe('"identity";r=3;t=60')
  })

  test('a check that outlasts check_timeout_seconds is judged locally too', async () => {
    await start({ requests_per_window: 5, check_timeout_seconds: 0.05 })
    store.hanging = true
    expect((await h.post(echo())).status).toBe(200)
    const [entry] = (await h.audit()).filter((e) => e.method === 'tools/call')
    expect(entry.reason).toBe('budget check degraded to local limit: budget check took longer than 0.05s (budget.check_timeout_seconds)')
  })

  test('a store that decides in memory (admitNow) and throws is judged locally the same way', async () => {
    const broken: BudgetStore = {
      admitNow: () => {
        throw new Error('bucket table corrupted')
      },
      admit: () => Promise.reject(new Error('bucket table corrupted')),
      refund: () => Promise.resolve(),
      close: () => Promise.resolve(),
    }
    h = await startBudgetHarness({ budget: { on_store_error: 'local', requests_per_window: 1 }, store: broken })
    expect((await h.post(echo(1))).status).toBe(200)
    expect((await h.post(echo(2))).status).toBe(429)
    const entries = (await h.audit()).filter((e) => e.method === 'tools/call')
    expect(entries[0].reason).toBe('budget check degraded to local limit: bucket table corrupted')
  })

  test('a reload keeps the local counts', async () => {
    await start({ requests_per_window: 2 })
    store.failing = true
    for (let i = 0; i < 2; i++) expect((await h.post(echo(i))).status).toBe(200)
    h.reload({ on_store_error: 'local', requests_per_window: 2 })
    expect((await h.post(echo(3))).status).toBe(429)
  })
})

test('a degraded call the MCP server never served is refunded to the local counts, not to the store', async () => {
  const port = await closedPort()
  await start({ requests_per_window: 2 }, { upstream: `http://127.0.0.1:${port}` })
  store.failing = true
  const statuses = []
  // Three where this replica allows two: without the local refunds the third would be 429.
  for (let i = 0; i < 3; i++) statuses.push((await h.post(echo(i))).status)
  expect(statuses).toEqual([502, 502, 502])
  expect(store.refunds).toBe(0)
  const [entry] = (await h.audit()).filter((e) => e.method === 'tools/call')
  expect(entry.reason).toContain(`budget check degraded to local limit: ${DOWN}; budget refunded: the call never reached the MCP server`)
})

test('when the store answers again its counts decide, the local ones added to them once, before the first check is judged', async () => {
  await start({ requests_per_window: 10, window_seconds: 60 })
  store.replicas = 2
  for (let i = 0; i < 2; i++) await h.post(echo(i))
  store.failing = true
  for (let i = 0; i < 3; i++) expect((await h.post(echo(i))).status).toBe(200)
  store.failing = false
  const back = await h.post(echo(9))
  expect(back.status).toBe(200)
  // The shared verdict, judged with the three local units it carried: 2 + 3 + 1.
  expect(back.headers.get('ratelimit')).toBe('"identity";r=4;t=60')
  expect(store.handed).toEqual([[{ key: windowKey(identityKey('acme', 'alice'), 60), count: 3, windowSeconds: 60 }]])
  // 2 + 2 shared, 3 local: the window's total counts every call that ran.
  expect((await h.post(echo(10))).headers.get('ratelimit')).toBe('"identity";r=3;t=60')
  expect(store.handed).toHaveLength(1)
  const entries = (await h.audit()).filter((e) => e.method === 'tools/call')
  expect(entries.at(-1)?.reason).toBeUndefined()
})

describe('/readyz says how the budget store is doing', () => {
  test('ok while checks are shared', async () => {
    await start({})
    await h.post(echo())
    expect(await readyz()).toMatchObject({ budget_store: 'ok', budget_degraded_checks_last_minute: 0, budget_fail_opens_last_minute: 0 })
  })

  test('failing_open while checks fail open', async () => {
    await start({ on_store_error: 'open' })
    store.failing = true
    await h.post(echo())
    expect(await readyz()).toMatchObject({ budget_store: 'failing_open', budget_fail_opens_last_minute: 1 })
    expect(await metricSample(h.url, 'wardline_budget_degraded_total')).toBe(0)
  })
})

describe('on a real Postgres store behind a proxy that the test cuts', () => {
  let db: TestDatabase
  let admin: Pool
  let proxy: PostgresProxy
  let storePool: Pool
  beforeAll(async () => {
    ;({ db, pool: admin } = await openTestDatabase(2))
    await migrate(admin, silentLogger())
    proxy = await PostgresProxy.start(db.url)
    storePool = testPool(proxy.urlFor(db.url), 4)
  })
  afterAll(async () => {
    await storePool.end()
    await proxy.close()
    await closeTestDatabase({ db, pool: admin })
  })

  test('two live replicas: the outage admits (limit − used) ÷ 2 here, and the row counts them once the database is back', async () => {
    // Another replica beat a moment ago: this one counts two.
    await admin.query("INSERT INTO wardline_replicas (replica_id, heartbeat_at) VALUES ('other', clock_timestamp())")
    const pg = new PostgresBudgetStore(storePool, { checkTimeoutMs: 2000 })
    await pg.start()
    expect(pg.liveReplicas()).toBe(2)
    h = await startBudgetHarness({ budget: { on_store_error: 'local', requests_per_window: 10, check_timeout_seconds: 2 }, store: pg })
    const row = windowKey(identityKey('acme', 'alice'), 60)
    const count = async (): Promise<number> =>
      (await admin.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1', [row])).rows[0].count

    for (let i = 0; i < 4; i++) expect((await h.post(echo(i))).status).toBe(200)
    proxy.refuse()
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push((await h.post(echo(i))).status)
    expect(statuses).toEqual([200, 200, 200, 429]) // floor((10 − 4) ÷ 2)
    expect(await count()).toBe(4)
    expect(await readyz()).toMatchObject({ budget_store: 'degraded', budget_degraded_checks_last_minute: 4 })

    proxy.allow()
    const back = await h.post(echo(9))
    expect(back.status).toBe(200)
    // The three local units reached the row with this check, before it was judged: 4 + 3 + 1.
    expect(back.headers.get('ratelimit')).toBe('"identity";r=2;t=60')
    expect(await count()).toBe(8)
    const entries = (await h.audit()).filter((e) => e.method === 'tools/call')
    const reasons = entries.map((e) => e.reason ?? '')
    expect(reasons).toHaveLength(9)
    expect(reasons.slice(0, 4)).toEqual(['', '', '', ''])
    for (const reason of reasons.slice(4, 7)) expect(reason).toMatch(/^budget check degraded to local limit: /)
    expect(reasons[7]).toMatch(/^rate limit exceeded: identity bucket, 10 requests per 60s window; budget check degraded to local limit: /)
    expect(reasons[8]).toBe('')
    // Two units left in the window for everyone: the outage did not hand out a fresh limit.
    expect((await h.post(echo(10))).headers.get('ratelimit')).toBe('"identity";r=1;t=60')
  })
})
