import type { Pool } from 'pg'
import { MCP_HEADERS, as, type Harness, rpc, startHarness, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

/**
 * /readyz must say whether the database answers, not whether the gateway's pool has a free
 * connection: a saturated pool is reported in the body, the status stays 200.
 */
let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(2)))
afterAll(() => closeTestDatabase({ db, pool }))

function call(h: Harness, identity: string, id: number): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' }, id)),
  })
}

test('/readyz stays 200 while the one pooled connection is busy and the database answers, and is 503 once it does not', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn: proxy.urlFor(db.url), max_connections: 1 },
      budget: { requests_per_window: 1000, window_seconds: 60, check_timeout_seconds: 10 },
    },
  })
  const holder = await pool.connect()
  const pending: Array<Promise<Response>> = []
  try {
    expect((await call(h, 'busy', 0)).status).toBe(200) // creates the bucket rows
    // Hold every bucket row: the next check takes the pool's only connection and waits on the lock,
    // and the audit entry of an unbudgeted call after it waits for the connection. (A second budget
    // check would not: it waits for the next budget statement, which the store starts only when it
    // has a connection to spare.)
    await holder.query('BEGIN')
    await holder.query('SELECT * FROM budget_buckets FOR UPDATE')
    pending.push(call(h, 'busy', 1))
    await waitFor(
      async () =>
        (
          await pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
          )
        ).rows[0].n === 1,
      { what: 'the budget check to wait on the held row lock' },
    )
    pending.push(
      fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as('busy') }, body: JSON.stringify(rpc('tools/list', {}, 2)) }),
    )
    const body = await waitFor(
      async () => {
        const busy = await fetch(`${h.url}/readyz`)
        expect(busy.status).toBe(200)
        const seen = (await busy.json()) as { checks: Record<string, { pool_waiting?: number }> }
        return seen.checks.postgres?.pool_waiting === 1 && seen
      },
      { what: '/readyz to report the audit write waiting for the pool' },
    )
    expect(body.checks.postgres).toMatchObject({ ok: true, pool_total: 1, pool_idle: 0, pool_waiting: 1 })

    proxy.pause() // the database stops answering (for the gateway)
    // A result is reused for up to 1 s (SharedReadiness), then the next probe hangs for its 2 s bound and
    // says 503. Without that bound the probe would hang as long as the database does: 10 s is far from both.
    const hung = await waitFor(
      async () => {
        const res = await fetch(`${h.url}/readyz`)
        if (res.status !== 200) return res
        await res.arrayBuffer()
        return null
      },
      { what: '/readyz to turn 503 once the database stops answering', timeoutMs: 10_000 },
    )
    expect(hung.status).toBe(503)
    expect(((await hung.json()) as { checks: Record<string, unknown> }).checks.postgres).toMatchObject({ ok: false })
  } finally {
    proxy.resume()
    await holder.query('COMMIT').catch(() => undefined)
    holder.release()
    await Promise.all(
      pending.map((p) =>
        p.then(
          (r) => r.arrayBuffer(),
          () => undefined,
        ),
      ),
    )
    await h.close()
    await proxy.close()
  }
}, 60_000)
