/**
 * Refunds of unserved calls with the shared Postgres store: a real gateway with postgres_storage on a
 * fresh database, a hand-written upstream on port 0, the budget_buckets rows read back from outside.
 * The refund runs after the response, so the rows are polled.
 */
import type { ServerResponse } from 'node:http'
import { join } from 'node:path'
import type { Pool } from 'pg'
import { identityKey, tenantKey, toolKey, windowKey } from '../../src/budget/keys'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { capturingLogger } from '../budget/budget-harness'
import { type RawUpstream, startRawUpstream } from '../e2e/raw-upstream'
import { MCP_HEADERS, as, configFrom, metricSample, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(4)))
afterAll(() => closeTestDatabase({ db, pool }))

const closers: Array<() => Promise<void>> = []
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close()
})

/** What the upstream does with the next request: answer with that status, or hold it for the test. */
type Mode = 200 | 503 | 'stall'

interface Rig {
  readonly gateway: RunningGateway
  readonly upstream: RawUpstream
  readonly logs: ReturnType<typeof capturingLogger>['lines']
  readonly auditFile: string
  mode: Mode
  /** Requests the upstream holds unanswered (mode `stall`). */
  readonly held: ServerResponse[]
}

function answer(res: ServerResponse, status: number): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(
    JSON.stringify(
      status === 200
        ? { jsonrpc: '2.0', id: 1, result: { content: [] } }
        : { jsonrpc: '2.0', id: 1, error: { code: -32000, message: 'busy' } },
    ),
  )
}

/** A gateway with postgres_storage (through `dsn`) in front of an upstream that does what `rig.mode` says. */
async function startRig(dsn: string): Promise<Rig> {
  const sw: { mode: Mode; readonly held: ServerResponse[] } = { mode: 200, held: [] }
  const upstream = await startRawUpstream((_req, res) => {
    if (sw.mode === 'stall') sw.held.push(res)
    else answer(res, sw.mode)
  })
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      auth: { mode: 'header' },
      audit: { output: auditFile, spill_file: join(dir, 'spill.jsonl') },
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn, max_connections: 4 },
      budget: {
        requests_per_window: 5,
        window_seconds: 60,
        tenants: { acme: { requests_per_window: 10, window_seconds: 60 } },
        tools: { search: { requests_per_window: 20, window_seconds: 60 } },
      },
    },
    {},
    dir,
  )
  const { log, lines } = capturingLogger()
  const gateway = await startGateway(config, { log })
  closers.push(async () => {
    await upstream.close()
    await gateway.shutdown()
  })
  return Object.assign(sw, { gateway, upstream, logs: lines, auditFile })
}

function call(rig: Rig, identity: string): Promise<Response> {
  return fetch(`${rig.gateway.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('search')),
  })
}

/** The keys of the three buckets a call to `search` by (acme, identity) is charged to, in check order. */
function keysOf(identity: string): string[] {
  return [windowKey(toolKey('search'), 60), windowKey(tenantKey('acme'), 60), windowKey(identityKey('acme', identity), 60)]
}

/** The count of each of `keys` in budget_buckets (null for a missing row), read through the test's own pool. */
async function counts(keys: readonly string[]): Promise<Array<number | null>> {
  const r = await pool.query<{ key: string; count: number }>('SELECT key, count FROM budget_buckets WHERE key = ANY($1::text[])', [keys])
  return keys.map((k) => r.rows.find((row) => row.key === k)?.count ?? null)
}

/** `values` with `n` added to each. */
function plus(values: ReadonlyArray<number | null>, n: number): number[] {
  return values.map((v) => (v ?? 0) + n)
}

const REFUNDS = 'wardline_budget_refunds_total{reason="unserved"}'
const REFUND_FAILURES = 'wardline_budget_refund_failures_total'

test('an upstream 503 gives every budget_buckets row back the count it had before the call', async () => {
  const rig = await startRig(db.url)
  // Different callers share the tool and tenant rows; each test uses its own identity.
  const keys = keysOf('carol')
  expect((await call(rig, 'carol')).status).toBe(200)
  const before = await counts(keys)
  expect(before[2]).toBe(1)

  rig.mode = 503
  const refused = await call(rig, 'carol')
  expect(refused.status).toBe(503)
  // Counts after the refund: what was used before the call (t is the database's, so only r is compared).
  const r = [...(refused.headers.get('ratelimit') ?? '').matchAll(/;r=(\d+);/g)].map((m) => Number(m[1]))
  expect(r).toEqual([20 - before[0]!, 10 - before[1]!, 5 - 1])
  await waitFor(async () => JSON.stringify(await counts(keys)) === JSON.stringify(before), {
    what: 'the rows to return to their counts before the call',
    intervalMs: 50,
  })
  // Counted once the statement's answer is back, a moment after the rows changed.
  await waitFor(async () => (await metricSample(rig.gateway.url, REFUNDS)) === 1, { what: 'the refund to be counted' })
  expect(await metricSample(rig.gateway.url, REFUND_FAILURES)).toBe(0)
})

test('a call admitted after its client left is never sent and is refunded', async () => {
  const rig = await startRig(db.url)
  const keys = keysOf('dora')
  // Connection: close, so the only connection the gateway holds later is the one the client abandons.
  const seed = await send(
    `${rig.gateway.url}/mcp`,
    'POST',
    { ...MCP_HEADERS, ...as('dora'), connection: 'close' },
    JSON.stringify(toolCall('search')),
  )
  expect(seed.status).toBe(200)
  const before = await counts(keys)
  expect(before[2]).toBe(1)

  // Hold dora's row so the next check waits in the database until the client is gone.
  const holder = await pool.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT 1 FROM budget_buckets WHERE key = $1 FOR UPDATE', [keys[2]])
    const client = new AbortController()
    // node:http, whose abort closes the socket at once (fetch's may keep it until its keep-alive timeout).
    const leaving = open(`${rig.gateway.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('dora') },
      body: JSON.stringify(toolCall('search')),
      signal: client.signal,
    }).catch((err: unknown) => err)
    await waitFor(
      async () =>
        (
          await pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
            [db.name],
          )
        ).rows[0].n === 1,
      { what: 'the budget check to wait on the row lock', intervalMs: 20 },
    )
    client.abort()
    await leaving
    await waitFor(() => new Promise<boolean>((resolve) => rig.gateway.server.getConnections((_err, n) => resolve(n === 0))), {
      what: 'the gateway to see the client go',
    })
    await holder.query('COMMIT')
  } finally {
    holder.release()
  }
  // Right after the COMMIT the check may not have charged yet, so the rows are read once the refund is
  // known to be done: the entry is written when the gateway gave up on the call (and started the
  // refund), the metric once the refund statement came back.
  const left = await waitFor(
    async () => {
      await rig.gateway.audit.flush()
      return readJsonl(rig.auditFile).filter((e) => e.identity === 'dora')[1]
    },
    { what: "the abandoned call's audit entry" },
  )
  expect(left).toMatchObject({ status: 499, reason: 'client closed the connection; budget refunded: the call never left the gateway' })
  await waitFor(async () => (await metricSample(rig.gateway.url, REFUNDS)) === 1, { what: 'the refund to be counted' })
  expect(await counts(keys)).toEqual(before)
  expect(rig.upstream.seen).toHaveLength(1) // only the first call reached the upstream
})

test('a refund the database cannot take is counted and logged, and the 503 still arrives at once', async () => {
  const proxy = await PostgresProxy.start(db.url)
  closers.push(() => proxy.close())
  const rig = await startRig(proxy.urlFor(db.url))
  const keys = keysOf('erin')
  const before = await counts(keys)
  rig.mode = 'stall'
  const pending = call(rig, 'erin')
  await waitFor(() => rig.held.length === 1, { what: 'the upstream to receive the admitted call' })
  const charged = plus(before, 1)
  expect(await counts(keys)).toEqual(charged) // charged before it was forwarded

  proxy.refuse() // the database is gone from the gateway's side
  const answeredAt = performance.now()
  answer(rig.held[0], 503)
  const refused = await pending
  expect(refused.status).toBe(503)
  expect(performance.now() - answeredAt).toBeLessThan(1000) // far inside check_timeout_seconds (5 s): nobody waits for the refund

  await waitFor(async () => (await metricSample(rig.gateway.url, REFUND_FAILURES)) === 1, { what: 'the failed refund to be counted' })
  expect(await metricSample(rig.gateway.url, REFUNDS)).toBe(0)
  const warning = rig.logs.find((l) => l.message === 'could not refund a call the MCP server never served')
  expect(warning).toMatchObject({ level: 'warn' })
  expect(typeof warning?.error).toBe('string')
  expect(await counts(keys)).toEqual(charged) // the charge stays until its window ends

  proxy.allow() // so the shutdown can write the audit entries it spilled meanwhile
})
