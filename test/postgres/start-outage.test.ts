import { existsSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { identityKey, windowKey } from '../../src/budget/keys'
import { describeError } from '../../src/errors'
import { PostgresBringUp } from '../../src/postgres/bring-up'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { silentLogger } from '../../src/log'
import { capturingLogger } from '../budget/budget-harness'
import { MCP_HEADERS, as, configFrom, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { freshDatabase, type TestDatabase, withClient } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'

/**
 * With budget.on_store_error open or local, a gateway whose database is unreachable
 * at startup (or whose migrations fail) starts anyway, serves with the fallback, says why on /readyz,
 * and brings Postgres storage up (migrations, budget store, reaper) once the database answers. Every
 * test gets a database of its own that no migration has touched yet.
 */

interface Rig {
  readonly gateway: RunningGateway
  readonly db: TestDatabase
  readonly auditFile: string
  readonly spillFile: string
  readonly logs: ReturnType<typeof capturingLogger>['lines']
}

const cleanups: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined)
})

let upstream: ExampleServer
beforeAll(async () => {
  upstream = await startExampleServer({ mode: 'stateless-json' })
})
afterAll(() => upstream.close())

async function startRig(db: TestDatabase, dsn: string, onStoreError: string): Promise<Rig> {
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const spillFile = join(dir, 'spill', 'audit-spill.jsonl')
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      auth: { mode: 'header' },
      audit: { output: auditFile, spill_file: spillFile },
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn, max_connections: 4 },
      budget: { requests_per_window: 2, window_seconds: 60, check_timeout_seconds: 1, on_store_error: onStoreError },
    },
    {},
    dir,
  )
  const { log, lines } = capturingLogger()
  const gateway = await startGateway(config, { log })
  cleanups.push(() => gateway.shutdown())
  return { gateway, db, auditFile, spillFile, logs: lines }
}

async function call(rig: Rig, identity: string, id: number): Promise<number> {
  const res = await fetch(`${rig.gateway.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' }, id)),
  })
  await res.arrayBuffer()
  return res.status
}

async function readyz(rig: Rig): Promise<{ status: number; postgres: Record<string, unknown> }> {
  const res = await fetch(`${rig.gateway.url}/readyz`)
  const body = (await res.json()) as { checks: { postgres: Record<string, unknown> } }
  return { status: res.status, postgres: body.checks.postgres }
}

async function entriesOf(rig: Rig, identity: string): Promise<AuditEntry[]> {
  await rig.gateway.audit.flush()
  return readJsonl(rig.auditFile).filter((e) => e.identity === identity)
}

async function metric(rig: Rig, name: 'auditSpilled' | 'auditRejected' | 'auditReplayed'): Promise<number> {
  return (await rig.gateway.metrics.audit[name].get()).values.find((v) => v.labels.sink === 'postgres')?.value ?? 0
}

async function auditRowsOf(db: TestDatabase, requestIds: readonly string[]): Promise<Map<string, number>> {
  const r = await withClient(db.url, (c) =>
    c.query<{ request_id: string; n: number }>(
      'SELECT request_id, count(*)::int AS n FROM audit_entries WHERE request_id = ANY($1) GROUP BY request_id',
      [requestIds],
    ),
  )
  return new Map(r.rows.map((row) => [row.request_id, row.n]))
}

async function schemaVersion(db: TestDatabase): Promise<number | null> {
  return withClient(db.url, async (c) => {
    const exists = await c.query<{ t: string | null }>("SELECT to_regclass('wardline_schema_migrations')::text AS t")
    if (exists.rows[0].t === null) return null
    return (await c.query<{ v: number }>('SELECT max(version)::int AS v FROM wardline_schema_migrations')).rows[0].v
  })
}

async function sharedCount(db: TestDatabase, identity: string): Promise<number | null> {
  const key = windowKey(identityKey('acme', identity), 60)
  const r = await withClient(db.url, (c) => c.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1', [key]))
  return r.rows.length === 0 ? null : r.rows[0].count
}

/** Once the database is usable again: /readyz 200, budgets shared, every spilled entry in audit_entries once, none quarantined. */
async function expectBroughtUp(rig: Rig, earlyIds: readonly string[]): Promise<void> {
  await waitFor(async () => (await readyz(rig)).status === 200, {
    what: '/readyz to turn 200 once the database is back',
    timeoutMs: 20_000,
  })
  expect(await schemaVersion(rig.db)).toBeGreaterThanOrEqual(3)
  expect(rig.logs.filter((l) => l.message === 'postgres storage ready')).toHaveLength(1)

  const statuses = [await call(rig, 'after', 10), await call(rig, 'after', 11), await call(rig, 'after', 12)]
  expect(statuses).toEqual([200, 200, 429])
  expect(await sharedCount(rig.db, 'after')).toBe(2)
  expect((await entriesOf(rig, 'after')).map((e) => e.reason ?? '')).toEqual(['', '', expect.stringMatching(/^rate limit exceeded/)])

  await waitFor(async () => (await auditRowsOf(rig.db, earlyIds)).size === earlyIds.length, {
    what: 'the entries spilled before the bring-up to be replayed into audit_entries',
    timeoutMs: 20_000,
    intervalMs: 100,
  })
  expect([...(await auditRowsOf(rig.db, earlyIds)).values()]).toEqual(earlyIds.map(() => 1))
  expect(await metric(rig, 'auditReplayed')).toBeGreaterThanOrEqual(earlyIds.length)
  expect(await metric(rig, 'auditRejected')).toBe(0)
  expect(existsSync(`${rig.spillFile}.rejected`)).toBe(false)
}

test('with on_store_error open, a start while the database refuses connections serves failing open, says why, and brings storage up once it is back', async () => {
  const db = await freshDatabase()
  cleanups.push(() => db.drop())
  const proxy = await PostgresProxy.start(db.url)
  cleanups.push(() => proxy.close())
  proxy.refuse()

  const rig = await startRig(db, proxy.urlFor(db.url), 'open')
  const warnings = rig.logs.filter((l) => l.level === 'warn' && String(l.message).startsWith('postgres is not ready at startup'))
  expect(warnings.map((l) => l.message)).toEqual([
    'postgres is not ready at startup: serving with budget.on_store_error: open until it answers (retrying in the background)',
  ])
  expect(String(warnings[0].cause)).toMatch(/^postgres is unreachable: /)

  const statuses = [await call(rig, 'early', 1), await call(rig, 'early', 2), await call(rig, 'early', 3)]
  expect(statuses).toEqual([200, 200, 200]) // past the limit of 2: nothing is counted while the store is down
  const early = await entriesOf(rig, 'early')
  for (const e of early) expect(e.reason).toMatch(/^budget check failed open: postgres not ready: postgres is unreachable: /)

  const notReady = await readyz(rig)
  expect(notReady.status).toBe(503)
  expect(notReady.postgres.ok).toBe(false)
  expect(notReady.postgres.error).toMatch(/^not ready: postgres is unreachable: .*; retrying$/)

  // The entries of the calls above cannot reach the database: the writer spills them.
  await waitFor(async () => (await metric(rig, 'auditSpilled')) >= early.length, {
    what: 'the early entries to be spilled',
    timeoutMs: 20_000,
  })
  expect(await schemaVersion(db)).toBeNull()

  proxy.allow()
  await expectBroughtUp(
    rig,
    early.map((e) => e.request_id),
  )
}, 60_000)

test('with on_store_error local, a start whose migrations fail serves on the local limit, spills the audit (no table yet) and replays it once they run', async () => {
  const db = await freshDatabase()
  // A role that may connect but not create anything: migrations fail, and so does every audit insert
  // (audit_entries is not there). Neither may count as "this entry can never be stored".
  const role = `wl_startup_${db.name.slice(-12)}`
  await withClient(db.adminUrl, (c) => c.query(`CREATE ROLE ${role} LOGIN`))
  // Cleanups run last-pushed first: the gateway stops, then the database (with what the role created) goes, then the role.
  cleanups.push(() => withClient(db.adminUrl, (c) => c.query(`DROP ROLE IF EXISTS ${role}`)))
  cleanups.push(() => db.drop())
  const dsn = new URL(db.url)
  dsn.username = role

  const rig = await startRig(db, dsn.toString(), 'local')
  const warnings = rig.logs.filter((l) => l.level === 'warn' && String(l.message).startsWith('postgres is not ready at startup'))
  expect(warnings.map((l) => l.message)).toEqual([
    'postgres is not ready at startup: serving with budget.on_store_error: local until it answers (retrying in the background)',
  ])
  expect(warnings[0].cause).toMatch(/^postgres migrations failed: permission denied for schema public/)

  const statuses = [await call(rig, 'early', 1), await call(rig, 'early', 2), await call(rig, 'early', 3)]
  expect(statuses).toEqual([200, 200, 429]) // the limit of 2, enforced by this replica alone
  const early = await entriesOf(rig, 'early')
  const cause = 'budget check degraded to local limit: postgres not ready: postgres migrations failed: permission denied for schema public'
  expect(early).toHaveLength(3)
  expect(early[0].reason).toMatch(new RegExp(`^${cause}`))
  expect(early[1].reason).toMatch(new RegExp(`^${cause}`))
  expect(early[2].reason).toMatch(new RegExp(`^rate limit exceeded.*; ${cause}`))

  const notReady = await readyz(rig)
  expect(notReady.status).toBe(503)
  expect(notReady.postgres.ok).toBe(false)
  expect(notReady.postgres.error).toMatch(/^not ready: postgres migrations failed: permission denied for schema public.*; retrying$/)

  await waitFor(async () => (await metric(rig, 'auditSpilled')) >= early.length, {
    what: 'the early entries to be spilled',
    timeoutMs: 20_000,
  })
  expect(await metric(rig, 'auditRejected')).toBe(0)

  await withClient(db.url, (c) => c.query(`GRANT CREATE ON SCHEMA public TO ${role}`))
  await expectBroughtUp(
    rig,
    early.map((e) => e.request_id),
  )
}, 60_000)

test('with on_store_error closed, an unreachable database still stops startup with one clear line', async () => {
  const dir = tempDir()
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn: 'postgres://postgres@127.0.0.1:1/none', max_connections: 4 },
      budget: { requests_per_window: 2, window_seconds: 60, on_store_error: 'closed' },
    },
    {},
    dir,
  )
  const err = await startGateway(config, { log: silentLogger() }).then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toMatchObject({ code: 'WL_POSTGRES_UNAVAILABLE' })
  expect(describeError(err)).toMatch(/^postgres is unreachable.*ECONNREFUSED/)
})

test('a shutdown while the bring-up is waiting on a database that does not answer completes, and storage is never reported ready', async () => {
  const db = await freshDatabase()
  cleanups.push(() => db.drop())
  const proxy = await PostgresProxy.start(db.url)
  cleanups.push(() => proxy.close())
  proxy.pause() // connections open, nothing answers: every attempt runs into its bound
  const rig = await startRig(db, proxy.urlFor(db.url), 'open')
  expect(await call(rig, 'early', 1)).toBe(200)
  await rig.gateway.shutdown()
  proxy.resume()
  expect(rig.logs.some((l) => l.message === 'postgres storage ready')).toBe(false)
}, 60_000)

describe('PostgresBringUp', () => {
  /** A step that fails `failures` times, then succeeds; counts its runs. */
  function flaky(name: string, failures: number): { name: string; runs: number; run(): Promise<void> } {
    return {
      name,
      runs: 0,
      run() {
        this.runs++
        return this.runs <= failures ? Promise.reject(new Error(`${name} down`)) : Promise.resolve()
      },
    }
  }

  test('retries the steps left, in order, never repeating one that succeeded, and is ready once all have', async () => {
    const bringUp = new PostgresBringUp(silentLogger(), { retryDelayMs: 1, maxRetryDelayMs: 4 })
    const first = flaky('first', 0)
    const second = flaky('second', 2)
    bringUp.add(first)
    bringUp.add(second)
    await bringUp.startupAttempt(false)
    expect(bringUp.ready).toBe(false)
    expect(bringUp.cause).toBe('second down')
    expect(describeError(bringUp.notReadyError())).toBe('postgres not ready: second down (WL_POSTGRES_UNAVAILABLE)')
    const ready = new Promise<void>((resolve) => bringUp.launch(resolve))
    await ready
    expect([first.runs, second.runs]).toEqual([1, 3])
    expect(bringUp.ready).toBe(true)
    expect(bringUp.notReadyError()).toBeNull()
    expect(bringUp.attempts).toBe(3)
    await bringUp.close()
  })

  test('fails startup with the step’s own error when it fails fast (on_store_error closed)', async () => {
    const bringUp = new PostgresBringUp(silentLogger())
    bringUp.add(flaky('db', 1))
    await expect(bringUp.startupAttempt(true)).rejects.toThrow('db down')
  })

  test('close() during a retry wait leaves no timer, and a step in flight is the last one to run', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] })
    try {
      const bringUp = new PostgresBringUp(silentLogger())
      bringUp.add(flaky('db', 100))
      await bringUp.startupAttempt(false)
      bringUp.launch(() => undefined)
      expect(jest.getTimerCount()).toBe(1)
      await bringUp.close()
      expect(jest.getTimerCount()).toBe(0)
    } finally {
      jest.useRealTimers()
    }

    let release = (): void => undefined
    const held = new Promise<void>((resolve) => (release = resolve))
    const after = flaky('after', 0)
    const bringUp = new PostgresBringUp(silentLogger(), { retryDelayMs: 1 })
    bringUp.add({ name: 'held', run: () => held })
    bringUp.add(after)
    const attempt = bringUp.startupAttempt(false)
    const closed = bringUp.close()
    release()
    await Promise.all([attempt, closed])
    expect(after.runs).toBe(0)
    expect(bringUp.ready).toBe(false)
  })
})
