import { join } from 'node:path'
import type { Pool } from 'pg'
import { DEFAULT_RETRY_BOUND_MS } from '../../src/audit/writer'
import { MCP_HEADERS, as, type Harness, readJsonl, startHarness, tempDir, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

/**
 * A database that hangs (the network holds every packet: no error, no answer) rather than refusing:
 * audit entries must still reach the spill file within the retry bound, and a shutdown must finish in
 * bounded time with every entry in the spill file or the table.
 */
let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(2)))
afterAll(() => closeTestDatabase({ db, pool }))

interface Setup {
  readonly h: Harness
  readonly proxy: PostgresProxy
  readonly dir: string
  readonly spillFile: string
}

async function start(): Promise<Setup> {
  const proxy = await PostgresProxy.start(db.url)
  const dir = tempDir()
  const spillFile = join(dir, 'audit-spill.jsonl')
  const h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { postgres_storage: true },
      postgres: { dsn: proxy.urlFor(db.url), max_connections: 4 },
      audit: { output: join(dir, 'audit.jsonl'), spill_file: spillFile },
    },
  })
  return { h, proxy, dir, spillFile }
}

async function send(h: Harness, identity: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as(identity) },
      body: JSON.stringify(toolCall('echo', { text: 'x' }, i)),
    })
    expect(res.status).toBe(200)
    await res.arrayBuffer()
  }
}

function spilledIds(spillFile: string): Set<string> {
  return new Set([...readJsonl(spillFile), ...readJsonl(`${spillFile}.replaying`)].map((e) => e.request_id))
}

async function tableIds(): Promise<Set<string>> {
  return new Set((await pool.query<{ request_id: string }>('SELECT request_id FROM audit_entries')).rows.map((r) => r.request_id))
}

test('with the database hung, audit entries reach the spill file within the retry bound', async () => {
  const { h, proxy, dir, spillFile } = await start()
  try {
    await send(h, 'warm', 1)
    await h.gateway.audit.flush()
    proxy.pause()
    await send(h, 'hung', 10)
    await Promise.all(h.gateway.audit.writers.filter((w) => w.sink.name !== 'postgres').map((w) => w.flush()))
    const ids = readJsonl(join(dir, 'audit.jsonl'))
      .filter((e) => e.identity === 'hung')
      .map((e) => e.request_id)
    expect(ids).toHaveLength(10)
    const started = performance.now()
    await waitFor(() => ids.every((id) => spilledIds(spillFile).has(id)), {
      what: 'every entry in the spill file',
      timeoutMs: 20_000,
      intervalMs: 50,
    })
    // Without the retry bound a batch would be held for 5 attempts × the sink's 10 s timeout (50 s); twice
    // the bound leaves a loaded machine room and stays far from that.
    expect(performance.now() - started).toBeLessThan(2 * DEFAULT_RETRY_BOUND_MS)
  } finally {
    proxy.resume()
    await h.close()
    await proxy.close()
  }
}, 40_000)

test('a shutdown while the database hangs finishes in bounded time with every entry in the spill file or the table', async () => {
  const { h, proxy, dir, spillFile } = await start()
  let shutdownMs: number
  try {
    await send(h, 'warm', 1)
    await h.gateway.audit.flush()
    proxy.pause()
    await send(h, 'sigterm', 20)
    const started = performance.now()
    await h.close() // what SIGTERM runs
    shutdownMs = performance.now() - started
  } finally {
    proxy.resume()
    await proxy.close()
  }
  // The batch in flight gets the rest of its retry bound, the closing replay at most 3 s: twice that leaves a
  // loaded machine room and stays far from a shutdown held by the hung database (5 × 10 s per batch, or forever).
  expect(shutdownMs).toBeLessThan(2 * (DEFAULT_RETRY_BOUND_MS + 3000))
  const ids = readJsonl(join(dir, 'audit.jsonl'))
    .filter((e) => e.identity === 'sigterm')
    .map((e) => e.request_id)
  expect(ids).toHaveLength(20)
  const spilled = spilledIds(spillFile)
  const stored = await tableIds()
  expect(ids.filter((id) => !spilled.has(id) && !stored.has(id))).toEqual([])
  expect(spilled.size).toBeGreaterThan(0) // the hang really went through the spill file
}, 60_000)
