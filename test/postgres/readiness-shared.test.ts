/**
 * /readyz needs no token, so it must not cost the database a connection per request (once,
 * 200 concurrent probes gave "too many clients"). Readiness results are shared: one probe in flight,
 * a result reused for at most 1 s. Pings are counted on the wire (PostgresProxy: one simple Query each).
 */
import type { Pool } from 'pg'
import { postgresReadiness } from '../../src/postgres/readiness'
import { SharedReadiness } from '../../src/readiness'
import { startHarness } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, testPool, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'

let db: TestDatabase
let pool: Pool
let proxy: PostgresProxy

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(1))
  proxy = await PostgresProxy.start(db.url)
})
afterAll(async () => {
  await proxy.close()
  await closeTestDatabase({ db, pool })
})

test('200 concurrent checks share one ping; a result is reused until 1 s after its probe started, then probed again', async () => {
  const gatewayPool = testPool(proxy.urlFor(db.url), 1)
  let clock = 0
  const check = new SharedReadiness(postgresReadiness(gatewayPool), 1000, () => clock)
  try {
    const before = proxy.roundTrips
    const results = await Promise.all(Array.from({ length: 200 }, () => check.check()))
    expect(results.every((r) => r.ok)).toBe(true)
    expect(proxy.roundTrips - before).toBe(1)

    clock = 999 // still fresh
    expect((await check.check()).ok).toBe(true)
    expect(proxy.roundTrips - before).toBe(1)

    clock = 1000 // 1 s old: probed again, once for everyone asking meanwhile
    const again = await Promise.all(Array.from({ length: 50 }, () => check.check()))
    expect(again.every((r) => r.ok)).toBe(true)
    expect(proxy.roundTrips - before).toBe(2)
  } finally {
    await gatewayPool.end()
  }
})

test('a probe still running is shared even once it is older than the limit: never two pings at once', async () => {
  const gatewayPool = testPool(proxy.urlFor(db.url), 1)
  let clock = 0
  const check = new SharedReadiness(postgresReadiness(gatewayPool, { timeoutMs: 5000 }), 1000, () => clock)
  try {
    const before = proxy.roundTrips
    proxy.pause()
    const first = check.check()
    clock = 3000
    const second = check.check()
    expect(second).toBe(first)
    proxy.resume()
    expect((await first).ok).toBe(true)
    expect(proxy.roundTrips - before).toBe(1)
  } finally {
    proxy.resume()
    await gatewayPool.end()
  }
})

test('through the gateway, 200 concurrent /readyz requests cost at most 2 pings', async () => {
  const h = await startHarness({
    mode: 'stateless-json',
    config: { features: { postgres_storage: true }, postgres: { dsn: proxy.urlFor(db.url), max_connections: 2 } },
  })
  try {
    // Pings only: the revocation list polls the same database every 250 ms, and the heartbeat beats.
    const before = proxy.statements.length
    const pings = (): number => proxy.statements.slice(before).filter((sql) => sql === 'SELECT 1').length
    const startedMs = performance.now()
    const statuses = await Promise.all(
      Array.from({ length: 200 }, async () => {
        const res = await fetch(`${h.url}/readyz`)
        await res.arrayBuffer()
        return res.status
      }),
    )
    // A probe is shared for 1 s: on a loaded machine the 200 answers may span more than one such
    // window, each of which may ping once (never 200 pings, which is what this guards against).
    const windows = Math.floor((performance.now() - startedMs) / 1000) + 1
    expect(statuses.every((s) => s === 200)).toBe(true)
    expect(pings()).toBeLessThanOrEqual(windows + 1)
    expect(pings()).toBeGreaterThanOrEqual(1)
  } finally {
    await h.close()
  }
}, 30_000)
