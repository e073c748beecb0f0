import type { Pool } from 'pg'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { MIGRATIONS } from '../../src/postgres/migrations'
import { type Served as Replica, startServe, writeReplicaConfigs } from '../helpers/cli'
import { MCP_HEADERS, as, tempDir, toolCall } from '../helpers/harness'
import { freshDatabase, type TestDatabase, testPool } from '../helpers/postgres'

/** SIGTERM: the replica flushes its audit trail and exits; resolves with the exit code. */
function stop(replica: Replica): Promise<number | null> {
  return replica.stop('SIGTERM')
}

/** Starts one `wardline serve` process per file; if any fails, stops the others (an orphan would keep jest from exiting). */
async function startAll(files: readonly string[]): Promise<Replica[]> {
  const results = await Promise.allSettled(files.map((file) => startServe(file)))
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []))
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (failed) {
    await Promise.all(started.map(stop))
    throw failed.reason
  }
  return started
}

let db: TestDatabase
let upstream: ExampleServer
let pool: Pool

beforeAll(async () => {
  db = await freshDatabase()
  upstream = await startExampleServer({ mode: 'stateless-json' })
  pool = testPool(db.url, 2)
})

afterAll(async () => {
  await pool.end()
  await upstream.close()
  await db.drop()
})

test('two gateway processes on one database admit exactly the shared limit in total, counted from audit_entries', async () => {
  const dir = tempDir()
  const files = writeReplicaConfigs(dir, ['a', 'b'], {
    upstream: upstream.url,
    log_level: 'info',
    auth: { mode: 'header' },
    features: { budget_enforcement: true, postgres_storage: true },
    postgres: { dsn: db.url, max_connections: 5 },
    budget: { requests_per_window: 1000, window_seconds: 300, tools: { echo: { requests_per_window: 30, window_seconds: 300 } } },
  })
  // Started at the same moment: both run the migrations; the advisory lock lets one do it.
  const started = await startAll(files)
  let exitCodes: Array<number | null>
  try {
    const statuses = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const replica = started[i % 2]
        const res = await fetch(`${replica.url}/mcp`, {
          method: 'POST',
          headers: { ...MCP_HEADERS, ...as(`user-${i % 7}`) },
          body: JSON.stringify(toolCall('echo', { text: 'hi' }, i)),
        })
        await res.arrayBuffer()
        return res.status
      }),
    )
    expect(statuses.filter((s) => s === 200)).toHaveLength(30)
    expect(statuses.filter((s) => s === 429)).toHaveLength(70)
  } finally {
    // SIGTERM: each process flushes its audit trail into Postgres before it exits.
    exitCodes = await Promise.all(started.map(stop))
  }
  expect(exitCodes).toEqual([0, 0])
  const decisions = await pool.query<{ decision: string; n: number }>(
    "SELECT decision, count(*)::int AS n FROM audit_entries WHERE tool = 'echo' GROUP BY decision ORDER BY decision",
  )
  expect(decisions.rows).toEqual([
    { decision: 'allow', n: 30 },
    { decision: 'throttled', n: 70 },
  ])
  const migrations = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM wardline_schema_migrations')
  expect(migrations.rows[0].n).toBe(MIGRATIONS.length)
}, 60_000)
