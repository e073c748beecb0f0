import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Pool } from 'pg'
import { identityKey, windowKey } from '../../src/budget/keys'
import { describeError } from '../../src/errors'
import { silentLogger } from '../../src/log'
import { startGateway } from '../../src/server/compose'
import { MCP_HEADERS, as, configFrom, type Harness, startHarness, tempDir, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { busySessions } from '../helpers/budget-rows'
import { waitFor } from '../helpers/wait'

/** The row of an acme identity's bucket: the budget below has one 60 s window. */
const identityRow = (identity: string): string => windowKey(identityKey('acme', identity), 60)

let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(4)))
afterAll(() => closeTestDatabase({ db, pool }))

function postgresConfig(dsn: string, extra: { budget?: Record<string, unknown>; maxConnections?: number } = {}): Record<string, unknown> {
  return {
    features: { budget_enforcement: true, postgres_storage: true },
    postgres: { dsn, max_connections: extra.maxConnections ?? 4 },
    budget: { requests_per_window: 1000, window_seconds: 60, ...extra.budget },
  }
}

async function call(h: Harness, identity: string, id: number | string = 1): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' }, id)),
  })
}

type AuditRow = { request_id: string; decision: string; status: number; reason: string | null; identity: string; tool: string }

async function auditRows(): Promise<AuditRow[]> {
  return (await pool.query<AuditRow>('SELECT request_id, decision, status, reason, identity, tool FROM audit_entries ORDER BY id')).rows
}

async function countOf(key: string): Promise<number | null> {
  const r = await pool.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1', [key])
  return r.rows.length === 0 ? null : r.rows[0].count
}

/**
 * Holds the caller's identity row lock while one call goes through (it must fail open, answered 200
 * in well under the lock's hold), keeps the lock `holdMs` more, then waits until a late commit would have landed.
 */
async function failsOpenUnderLock(h: Harness, identity: string, holdMs: number): Promise<void> {
  const holder = await pool.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT 1 FROM budget_buckets WHERE key = $1 FOR UPDATE', [identityRow(identity)])
    const started = performance.now()
    expect((await call(h, identity, 2)).status).toBe(200)
    // The check's bound is 0.3 s; half the 5 s bound a reload must replace leaves a loaded machine room.
    expect(performance.now() - started).toBeLessThan(2500)
    // The scenario: a stuck transaction keeps the row a set time, so a check still waiting at COMMIT would charge.
    await new Promise((resolve) => setTimeout(resolve, holdMs))
    await holder.query('COMMIT')
  } finally {
    holder.release()
  }
  // A late charge would be a statement queued behind the lock: once nothing runs in the database it has landed.
  await waitFor(async () => (await busySessions(pool)) === 0, { what: 'every statement queued behind the lock to end', intervalMs: 20 })
}

describe('gateway with postgres_storage', () => {
  // With open or local the gateway starts anyway (start-outage.test.ts).
  test('with on_store_error closed, startup fails with one clear line within a few seconds when the database is unreachable', async () => {
    const dir = tempDir()
    const config = configFrom(
      {
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:9',
        auth: { mode: 'header' },
        audit: { output: `${dir}/a.jsonl` },
        ...postgresConfig('postgres://postgres@127.0.0.1:1/none', { budget: { on_store_error: 'closed' } }),
      },
      {},
      dir,
    )
    const started = performance.now()
    const err = await startGateway(config, { log: silentLogger() }).then(
      () => null,
      (e: unknown) => e,
    )
    expect(performance.now() - started).toBeLessThan(5000)
    expect(err).toMatchObject({ code: 'WL_POSTGRES_UNAVAILABLE' })
    expect(describeError(err)).toMatch(/^postgres is unreachable.*ECONNREFUSED/)
    expect(describeError(err)).not.toContain('\n')
  })

  test('startup fails when the spill file cannot be written, rather than losing entries at the first outage', async () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'a-file'), '')
    const config = configFrom(
      {
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:9',
        auth: { mode: 'header' },
        audit: { output: `${dir}/a.jsonl`, spill_file: `${dir}/a-file/spill.jsonl` },
        ...postgresConfig(db.url),
      },
      {},
      dir,
    )
    const err = await startGateway(config, { log: silentLogger() }).then(
      () => null,
      (e: unknown) => e,
    )
    expect(err).toMatchObject({ code: 'WL_CONFIG_INVALID' })
    expect(describeError(err)).toMatch(/^audit\.spill_file: cannot open .*a-file\/spill\.jsonl for appending \(E[A-Z]+\)/)
  })

  describe('with a healthy database', () => {
    let h: Harness
    beforeAll(async () => {
      h = await startHarness({ mode: 'stateless-json', config: postgresConfig(db.url, { budget: { requests_per_window: 3 } }) })
    })
    afterAll(async () => {
      await h.close()
    })

    test('calls are budgeted in the shared table and every decision lands in audit_entries as in the JSONL trail', async () => {
      const statuses = []
      for (let i = 0; i < 4; i++) statuses.push((await call(h, 'carol', i)).status)
      expect(statuses).toEqual([200, 200, 200, 429])
      expect(await countOf(identityRow('carol'))).toBe(3)
      const jsonl = (await h.audit()).filter((e) => e.identity === 'carol')
      const rows = (await auditRows()).filter((r) => r.identity === 'carol')
      expect(rows.map((r) => [r.request_id, r.decision, r.status, r.tool])).toEqual(
        jsonl.map((e) => [e.request_id, e.decision, e.status, e.tool]),
      )
      expect(rows.map((r) => r.decision)).toEqual(['allow', 'allow', 'allow', 'throttled'])
      expect(rows[0].reason).toBeNull() // an ordinary allow keeps an empty reason
    })

    test('/readyz reports the database and the fail-opens of the last minute', async () => {
      const res = await fetch(`${h.url}/readyz`)
      expect(res.status).toBe(200)
      const body = await res.json()
      expect(body).toMatchObject({
        status: 'ready',
        checks: { postgres: { ok: true, audit_spill_pending: false } },
        budget_fail_opens_last_minute: 0,
      })
    })
  })

  describe('with a database that fails', () => {
    let proxy: PostgresProxy
    beforeEach(async () => {
      proxy = await PostgresProxy.start(db.url)
    })
    afterEach(async () => {
      await proxy.close()
    })

    test('a stopped database fails open: the call is forwarded, the audit says why, /readyz turns 503', async () => {
      const h = await startHarness({
        mode: 'stateless-json',
        config: postgresConfig(proxy.urlFor(db.url), { budget: { check_timeout_seconds: 1 } }),
      })
      try {
        proxy.refuse()
        const res = await call(h, 'dave')
        expect(res.status).toBe(200)
        expect(((await res.json()) as { result?: unknown }).result).toBeDefined()
        const ready = await fetch(`${h.url}/readyz`)
        expect(ready.status).toBe(503)
        const body = (await ready.json()) as { checks: { postgres: { ok: boolean } }; budget_fail_opens_last_minute: number }
        expect(body.checks.postgres.ok).toBe(false)
        expect(body.budget_fail_opens_last_minute).toBe(1)
        const entry = (await h.audit()).find((e) => e.identity === 'dave')
        expect(entry).toMatchObject({ decision: 'allow', status: 200 })
        expect(entry?.reason).toMatch(/^budget check failed open: /)
      } finally {
        proxy.allow()
        await h.close()
      }
    })

    test('with on_store_error closed a stopped database gives 503 with Retry-After, and the audit says why', async () => {
      const h = await startHarness({
        mode: 'stateless-json',
        config: postgresConfig(proxy.urlFor(db.url), { budget: { on_store_error: 'closed', check_timeout_seconds: 1 } }),
      })
      try {
        proxy.refuse()
        const res = await call(h, 'erin', 7)
        expect(res.status).toBe(503)
        expect(res.headers.get('retry-after')).toBe('1')
        expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: 503 } })
        const entry = (await h.audit()).find((e) => e.identity === 'erin')
        expect(entry).toMatchObject({ decision: 'error', status: 503 })
        expect(entry?.reason).toMatch(/WL_BUDGET_STORE_FAILED/)
      } finally {
        proxy.allow()
        await h.close()
      }
    })
  })

  test('a row lock held past check_timeout_seconds fails open in time, with no ghost increment once it is released', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: postgresConfig(db.url, { budget: { check_timeout_seconds: 0.3 } }) })
    const key = identityRow('frank')
    try {
      expect((await call(h, 'frank')).status).toBe(200)
      expect(await countOf(key)).toBe(1)
      await failsOpenUnderLock(h, 'frank', 300) // the lock outlives the check
      expect(await countOf(key)).toBe(1)
      const reasons = (await h.audit()).filter((e) => e.identity === 'frank').map((e) => e.reason ?? '')
      expect(reasons[0]).toBe('')
      // The database's lock timeout or the store's own deadline, whichever a loaded machine lets answer first.
      expect(reasons[1]).toMatch(/^budget check failed open: .*(lock timeout|deadline|longer than|no budget verdict within)/)
    } finally {
      await h.close()
    }
  })

  test("a reload that shortens check_timeout_seconds shortens the store's bound too (no ghost increment), and keeps the fail-open count", async () => {
    const h = await startHarness({ mode: 'stateless-json', config: postgresConfig(db.url, { budget: { check_timeout_seconds: 5 } }) })
    const key = identityRow('grace')
    try {
      expect((await call(h, 'grace')).status).toBe(200)
      h.gateway.reload(configFrom({ ...h.tree, budget: { requests_per_window: 1000, window_seconds: 60, check_timeout_seconds: 0.3 } }))
      await failsOpenUnderLock(h, 'grace', 1000) // well past the new bound, far short of the old one
      expect(await countOf(key)).toBe(1) // the check given up on never charged
      expect((await h.audit()).filter((e) => e.identity === 'grace').at(-1)?.reason).toMatch(/^budget check failed open: /)
      h.gateway.reload(configFrom(h.tree)) // a reload in the middle of an outage does not hide it
      expect(await (await fetch(`${h.url}/readyz`)).json()).toMatchObject({ budget_fail_opens_last_minute: 1 })
    } finally {
      await h.close()
    }
  })

  test('a pool of 2 under 200 concurrent checks answers every call in bounded time and counts its fail-opens', async () => {
    const h = await startHarness({
      mode: 'stateless-json',
      config: postgresConfig(db.url, { maxConnections: 2, budget: { check_timeout_seconds: 1, requests_per_window: 100_000 } }),
    })
    try {
      const started = performance.now()
      const responses = await Promise.all(Array.from({ length: 200 }, (_, i) => call(h, `load-${i % 20}`, i)))
      const elapsed = performance.now() - started
      expect(responses.map((r) => r.status).every((s) => s === 200)).toBe(true)
      // Every check either got a connection and answered, or failed open at its 1 s bound.
      expect(elapsed).toBeLessThan(10_000)
      const entries = (await h.audit()).filter((e) => e.identity.startsWith('load-'))
      expect(entries).toHaveLength(200)
      const failedOpen = entries.filter((e) => e.reason?.startsWith('budget check failed open')).length
      const metrics = await (await fetch(`${h.url}/metrics`)).text()
      const counted = Number(/^wardline_budget_fail_open_total (\d+)/m.exec(metrics)?.[1])
      expect(counted).toBe(failedOpen)
    } finally {
      await h.close()
    }
    // Once the gateway stopped (refunds of verdicts that arrived too late are done by then), the
    // table holds exactly the admitted checks: a call that failed open charged nothing.
    const failedOpen = (await h.audit()).filter(
      (e) => e.identity.startsWith('load-') && e.reason?.startsWith('budget check failed open'),
    ).length
    const charged = await pool.query<{ n: number }>("SELECT coalesce(sum(count), 0)::int AS n FROM budget_buckets WHERE key LIKE '%load-%'")
    expect(charged.rows[0].n).toBe(200 - failedOpen)
  })
})
