import { join } from 'node:path'
import { existsSync, readFileSync } from 'node:fs'
import type { AuditWriter } from '../../src/audit/writer'
import { MCP_HEADERS, as, type Harness, readJsonl, startHarness, tempDir, toolCall } from '../helpers/harness'
import { ThrowawayPostgres, withClient, withDatabase } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'

/**
 * A database of our own that the tests stop and start (the machine's shared server is never touched):
 * every request must end up with exactly one row in audit_entries, whatever happened to Postgres.
 */
let server: ThrowawayPostgres
let dsn: string

beforeAll(async () => {
  server = await ThrowawayPostgres.launch()
  await withClient(server.url, (c) => c.query('CREATE DATABASE wardline'))
  dsn = withDatabase(server.url, 'wardline')
}, 60_000)

afterAll(async () => {
  await server?.close()
})

function config(dir: string): Record<string, unknown> {
  return {
    features: { budget_enforcement: true, postgres_storage: true },
    postgres: { dsn, max_connections: 4 },
    budget: { requests_per_window: 100_000, window_seconds: 60, check_timeout_seconds: 1 },
    audit: { output: join(dir, 'audit.jsonl'), spill_file: join(dir, 'spill', 'audit-spill.jsonl') },
  }
}

function postgresWriter(h: Harness): AuditWriter {
  const writer = h.gateway.audit.writers.find((w) => w.sink.name === 'postgres')
  if (!writer) throw new Error('no postgres audit writer')
  return writer
}

async function rowsPerRequest(): Promise<Map<string, number>> {
  const r = await withClient(dsn, (c) =>
    c.query<{ request_id: string; n: number }>('SELECT request_id, count(*)::int AS n FROM audit_entries GROUP BY request_id'),
  )
  return new Map(r.rows.map((row) => [row.request_id, row.n]))
}

async function auditRowCount(): Promise<number> {
  return (await withClient(dsn, (c) => c.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_entries'))).rows[0].n
}

/** Entries the postgres writer has put in the spill file so far (wardline_audit_spilled_total). */
async function spilledByPostgres(h: Harness): Promise<number> {
  return (await h.gateway.metrics.audit.auditSpilled.get()).values.find((v) => v.labels.sink === 'postgres')?.value ?? 0
}

async function send(h: Harness, identity: string, id: number): Promise<number> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'x' }, id)),
  })
  await res.arrayBuffer()
  return res.status
}

test('Postgres restarted during a load: every request has exactly one audit row afterwards', async () => {
  const dir = tempDir()
  const h = await startHarness({ mode: 'stateless-json', config: config(dir) })
  let running = true
  let sent = 0
  const statuses: number[] = []
  const workers = Array.from({ length: 8 }, async (_, w) => {
    while (running) statuses.push(await send(h, `restart-${w}`, sent++))
  })
  try {
    await waitFor(async () => (await auditRowCount()) > 0, { what: 'the load to reach audit_entries', intervalMs: 100 })
    await server.stop()
    // Batches that cannot reach the database are retried within the writer's retry bound, then spilled.
    await waitFor(async () => (await spilledByPostgres(h)) > 0, { what: 'a batch spilled during the outage', timeoutMs: 20_000 })
    await server.start()
    const atRestart = await auditRowCount()
    await waitFor(async () => (await auditRowCount()) > atRestart, {
      what: 'the restarted database to receive audit rows',
      intervalMs: 100,
    })
  } finally {
    running = false
    await Promise.all(workers)
  }
  expect(statuses.every((s) => s === 200)).toBe(true) // budget checks failed open during the outage
  await h.gateway.audit.flush()
  expect(await postgresWriter(h).replayNow()).toBe(true)
  expect(await spilledByPostgres(h)).toBeGreaterThan(0) // the outage really went through the spill file
  await h.close()

  const requests = readJsonl(join(dir, 'audit.jsonl')).filter((e) => e.identity.startsWith('restart-'))
  expect(requests.length).toBe(sent)
  const rows = await rowsPerRequest()
  const missing = requests.filter((e) => rows.get(e.request_id) !== 1)
  expect(missing).toEqual([])
  expect(requests.some((e) => e.reason?.startsWith('budget check failed open'))).toBe(true)
}, 60_000)

test('a shutdown while the database is down spills every entry, and the next start replays them once', async () => {
  const dir = tempDir()
  const first = await startHarness({ mode: 'stateless-json', config: config(dir) })
  await server.stop()
  try {
    for (let i = 0; i < 20; i++) expect(await send(first, 'sigterm', i)).toBe(200)
    await first.close() // what SIGTERM runs: drain, flush, spill what the database cannot take
  } finally {
    await server.start()
  }
  const spillFile = join(dir, 'spill', 'audit-spill.jsonl')
  // A replay attempted at shutdown (it failed: the database was down) leaves the file under .replaying.
  const spilled = [...readJsonl(spillFile), ...readJsonl(`${spillFile}.replaying`)]
  const requests = readJsonl(join(dir, 'audit.jsonl')).filter((e) => e.identity === 'sigterm')
  expect(requests).toHaveLength(20)
  expect(spilled.map((e) => e.request_id).sort()).toEqual(requests.map((e) => e.request_id).sort())

  const second = await startHarness({ mode: 'stateless-json', config: config(dir) })
  try {
    expect(await postgresWriter(second).replayNow()).toBe(true)
    for (const file of [spillFile, `${spillFile}.replaying`]) expect(existsSync(file) && readFileSync(file, 'utf8').length > 0).toBe(false)
    const rows = await rowsPerRequest()
    expect(requests.map((e) => rows.get(e.request_id))).toEqual(requests.map(() => 1))
  } finally {
    await second.close()
  }
}, 60_000)
