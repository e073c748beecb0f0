/**
 * Budgets with several servers on the shared Postgres store: the same scenarios as the memory store
 * (test/servers/budget-suite.ts), and a check that spans tool, server, tenant, identity and repeat
 * buckets is still one round trip to the database.
 */
import type { Pool } from 'pg'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { closeTestDatabase, openTestDatabase, type TestDatabase, testPool } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { startServersHarness } from '../helpers/servers'
import { callOn, serverBudgetSuite } from '../servers/budget-suite'

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(8))
  await migrate(pool, silentLogger())
})

afterAll(() => closeTestDatabase({ db, pool }))

serverBudgetSuite('Postgres store', async () => {
  await pool.query('TRUNCATE budget_buckets')
  return new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
})

test('a call charged to tool, server, tenant, identity and repeat buckets is one round trip to the database', async () => {
  await pool.query('TRUNCATE budget_buckets')
  const proxy = await PostgresProxy.start(db.url)
  const viaProxy = testPool(proxy.urlFor(db.url), 1)
  const h = await startServersHarness(
    { docs: {}, tickets: {} },
    {
      features: { budget_enforcement: true },
      budget: {
        requests_per_window: 100,
        window_seconds: 60,
        tenants: { acme: { requests_per_window: 100, window_seconds: 60 } },
        tools: {
          'docs/echo': {
            limits: [
              { requests_per_window: 100, window_seconds: 60 },
              { requests_per_window: 1000, window_seconds: 3600 },
            ],
          },
        },
        servers: { docs: { requests_per_window: 100, window_seconds: 60 } },
        repeat_limit: { calls: 100, window_seconds: 60 },
      },
    },
    { budgetStore: new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 5000 }) },
  )
  try {
    const first = await callOn(h, 'docs', 'alice') // opens the connection and prepares the statement
    expect(first.headers.get('ratelimit-policy')).toContain('"server";q=100;w=60')
    const before = proxy.roundTrips
    for (let i = 0; i < 10; i++) expect((await callOn(h, 'docs', 'alice', 'echo', { text: `call ${i}` })).status).toBe(200)
    expect(proxy.roundTrips - before).toBe(10)
  } finally {
    await h.close()
    await viaProxy.end()
    await proxy.close()
  }
})
