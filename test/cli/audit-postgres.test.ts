/**
 * `wardline audit` against Postgres storage (audit_entries), as an operator runs it: the same
 * answers as over the JSONL trail, bounded queries on the migration 005 indexes, and streaming.
 */
import { spawn } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Pool } from 'pg'
import { type AuditEntry, toJsonLines } from '../../src/audit/entry'
import { PostgresAuditSink } from '../../src/audit/postgres-sink'
import { buildFilter } from '../../src/audit/query'
import { entriesQuery, likePattern, summaryQuery } from '../../src/audit/query-postgres'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { MIGRATIONS } from '../../src/postgres/migrations'
import { auditEntry, sampleTrail } from '../helpers/audit-entry'
import { ROOT, cliMain, runCli } from '../helpers/cli'
import { tempDir } from '../helpers/harness'
import { type TestDatabase, freshDatabase, testPool } from '../helpers/postgres'

const dir = tempDir('wardline-audit-pg-')
const now = Date.now()
const ago = (minutes: number): string => new Date(now - minutes * 60_000).toISOString()

/** The JSONL tests' trail, with a session id on r1 and an identity that needs quoting in SQL (r9). */
const ENTRIES: AuditEntry[] = [
  ...sampleTrail(ago).map((e) => (e.request_id === 'r1' ? { ...e, session_id: 's-1' } : e)),
  auditEntry('r9', { timestamp: ago(4), identity: "o'brien\\", tool: '!x' }),
]

let db: TestDatabase
let pool: Pool
let config: string
const trail = join(dir, 'audit.jsonl')

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 2)
  await migrate(pool, silentLogger())
  await new PostgresAuditSink(pool).write(ENTRIES)
  writeFileSync(trail, toJsonLines(ENTRIES))
  config = join(dir, 'pg.yaml')
  writeFileSync(
    config,
    `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(db.url)} }\naudit: { output: null }\n`,
  )
})

afterAll(async () => {
  await pool.end()
  await db.drop()
})

function audit(...args: string[]): { code: number; stdout: string; stderr: string } {
  return runCli(['audit', '--config', config, ...args])
}

function ids(stdout: string): string[] {
  return stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (JSON.parse(l) as AuditEntry).request_id)
}

test('the table gives the same answers as the JSONL trail, byte for byte, for every kind of filter', () => {
  const cases: string[][] = [
    ['--limit', '0'],
    ['--identity', 'ali*'],
    ['--identity', '*ia'],
    ['--identity', 'a%b_c'],
    ['--identity', 'a%b*'],
    ['--identity', "o'brien\\"],
    ['--tool', '!*'],
    ['--identity', ''],
    ['--decision', 'throttled,deny', '--tenant', 'acme'],
    ['--since', '1h', '--until', '15m'],
    ['--limit', '3'],
    ['--summary'],
    ['--summary', '--by', 'tenant,tool', '--decision', 'allow,throttled', '--format', 'csv'],
    ['--format', 'csv', '--identity', 'alice'],
    ['--reason-code', 'budget.exceeded,policy.denied'],
    ['--reason-code', 'budget.repeat', '--format', 'csv'],
    ['--reason-code', 'budget.repeat,budget.exceeded', '--summary'],
    ['--server', 'docs'],
    ['--server', 'd*'],
    ['--server', '*'],
    ['--server', '%'],
    ['--format', 'csv', '--server', 'tickets'],
    ['--server', 'docs', '--summary'],
  ]
  for (const args of cases) {
    const fromTable = audit(...args)
    const fromFile = runCli(['audit', '--file', trail, ...args])
    expect({ args, ...fromTable }).toEqual({ args, ...fromFile })
    expect(fromTable.code).toBe(0)
  }
  expect(ids(audit('--identity', 'a%b_c').stdout)).toEqual(['r5'])
  expect(ids(audit('--identity', "o'brien\\").stdout)).toEqual(['r9'])
  expect(ids(audit('--reason-code', 'budget.exceeded,policy.denied').stdout)).toEqual(['r2', 'r3'])
  expect(ids(audit('--server', 'docs').stdout)).toEqual(['r3', 'r4'])
  expect(ids(audit('--server', '*').stdout)).toEqual(['r3', 'r4', 'r6'])
})

test('a database at schema version 9 (before server names): entries read without one, --server says what to do', async () => {
  const old = await freshDatabase()
  const oldPool = testPool(old.url, 1)
  try {
    await migrate(oldPool, silentLogger(), MIGRATIONS.slice(0, 9))
    await oldPool.query(
      `INSERT INTO audit_entries (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms, reason_code)
       VALUES ('o1', now(), 'alice', 'acme', 'tools/call', 'echo', 'deny', 403, 1.5, 'policy.denied')`,
    )
    const file = join(dir, 'old9.yaml')
    writeFileSync(
      file,
      `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(old.url)} }\naudit: { output: null }\n`,
    )
    const all = runCli(['audit', '--config', file])
    expect(all.code).toBe(0)
    expect(JSON.parse(all.stdout)).toMatchObject({ request_id: 'o1', reason_code: 'policy.denied' })
    expect(JSON.parse(all.stdout)).not.toHaveProperty('server')
    const filtered = runCli(['audit', '--config', file, '--server', 'docs'])
    expect(filtered.code).toBe(1)
    expect(filtered.stderr).toMatch(/--server: the database schema is at version 9, and server names arrived with version 10/)
  } finally {
    await oldPool.end()
    await old.drop()
  }
})

test('a database at schema version 8 (before reason codes): entries read without one, --reason-code says what to do', async () => {
  const old = await freshDatabase()
  const oldPool = testPool(old.url, 1)
  try {
    await migrate(oldPool, silentLogger(), MIGRATIONS.slice(0, 8))
    await oldPool.query(
      `INSERT INTO audit_entries (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms, reason)
       VALUES ('o1', now(), 'alice', 'acme', 'tools/call', 'echo', 'deny', 403, 1.5, 'rule 0')`,
    )
    const file = join(dir, 'old.yaml')
    writeFileSync(
      file,
      `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(old.url)} }\naudit: { output: null }\n`,
    )
    const all = runCli(['audit', '--config', file])
    expect(all.code).toBe(0)
    expect(JSON.parse(all.stdout)).toMatchObject({ request_id: 'o1', decision: 'deny', reason: 'rule 0' })
    expect(JSON.parse(all.stdout)).not.toHaveProperty('reason_code')
    const filtered = runCli(['audit', '--config', file, '--reason-code', 'policy.denied'])
    expect(filtered.code).toBe(1)
    expect(filtered.stderr).toMatch(/--reason-code: the database schema is at version 8, and reason codes arrived with version 9/)
  } finally {
    await oldPool.end()
    await old.drop()
  }
})

test('filters are parameters: SQL in a filter is a name that matches nothing, and the table is still there', () => {
  for (const attempt of ["x' OR '1'='1", "*'; DROP TABLE audit_entries; --", '%', '_', 'alice%']) {
    const r = audit('--identity', attempt)
    expect({ attempt, code: r.code, stdout: r.stdout }).toEqual({ attempt, code: 0, stdout: '' })
  }
  expect(likePattern('a%b_c!*')).toBe('a!%b!_c!!%')
  const q = summaryQuery(buildFilter({ identity: "x'--", tool: 'a*', decision: 'deny' }, now), ['identity'], 5)
  expect(q.text).not.toContain("x'--")
  expect(q.values).toContain("x'--")
})

test('an unreachable database, a database never migrated: exit 1 with what is wrong, the DSN not shown', async () => {
  const down = join(dir, 'down.yaml')
  writeFileSync(
    down,
    'upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: "postgres://u:s3cret@127.0.0.1:1/x" }\n',
  )
  const r = runCli(['audit', '--config', down])
  expect(r.code).toBe(1)
  expect(r.stderr).toMatch(/^wardline audit: postgres unreachable \(postgres\.dsn of .*down\.yaml\): .*ECONNREFUSED/)
  expect(r.stderr).not.toContain('s3cret')

  const empty = await freshDatabase()
  try {
    const bare = join(dir, 'bare.yaml')
    writeFileSync(
      bare,
      `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(empty.url)} }\n`,
    )
    const b = runCli(['audit', '--config', bare])
    expect(b.code).toBe(1)
    expect(b.stderr).toMatch(/no Wardline schema in the database of .*bare\.yaml/)
  } finally {
    await empty.drop()
  }
})

describe('a large table (200 000 rows)', () => {
  const ROWS = 200_000
  beforeAll(async () => {
    // ~1 KiB a row: the whole answer (~200 MiB of JSONL) is far more than the CLI may hold.
    await pool.query(
      `INSERT INTO audit_entries (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms, reason, reason_code, server)
       SELECT 'big-' || g, now() - interval '2 days' + g * interval '100 ms', 'user-' || (g % 1000), 'acme', 'tools/call',
              'tool-' || (g % 50), CASE WHEN g % 10 = 0 THEN 'throttled' ELSE 'allow' END, 200, 1.25, repeat('x', 1000),
              CASE WHEN g % 10 = 0 THEN 'budget.exceeded' END,
              CASE WHEN g % 100 = 5 THEN 'docs' WHEN g % 2 = 0 THEN 'tickets' END
         FROM generate_series(1, $1) AS g`,
      [ROWS],
    )
    await pool.query('ANALYZE audit_entries')
  }, 120_000)

  test('an identity filter is an index range scan read backwards, stopping at the limit: no sort of the table', async () => {
    const q = entriesQuery(buildFilter({ identity: 'user-7', since: '7d' }, Date.now()), 100)
    const plan = (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${q.text}`, q.values as unknown[])).rows
      .map((r) => r['QUERY PLAN'])
      .join('\n')
    expect(plan).toMatch(/Index Scan Backward using audit_entries_identity_time/)
    expect(plan).toMatch(/Limit/)
    expect(plan).not.toMatch(/Seq Scan/)
    const prefix = entriesQuery(buildFilter({ identity: 'user-7*', decision: 'throttled' }, Date.now()), 100)
    const prefixPlan = (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${prefix.text}`, prefix.values as unknown[])).rows
      .map((r) => r['QUERY PLAN'])
      .join('\n')
    expect(prefixPlan).not.toMatch(/Seq Scan/)
  })

  test('a reason code filter reads the partial index of migration 9 backwards, stopping at the limit', async () => {
    const q = entriesQuery(buildFilter({ reasonCode: 'budget.exceeded' }, Date.now()), 100)
    const plan = (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${q.text}`, q.values as unknown[])).rows
      .map((r) => r['QUERY PLAN'])
      .join('\n')
    expect(plan).toMatch(/Index Scan Backward using audit_entries_reason_code_time/)
    expect(plan).not.toMatch(/Seq Scan/)
  })

  test('a server filter reads the partial index of migration 10 backwards, stopping at the limit', async () => {
    const explain = async (server: string): Promise<string> => {
      const q = entriesQuery(buildFilter({ server }, Date.now()), 100)
      return (await pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${q.text}`, q.values as unknown[])).rows
        .map((r) => r['QUERY PLAN'])
        .join('\n')
    }
    const exact = await explain('docs')
    expect(exact).toMatch(/Index Scan Backward using audit_entries_server_time/)
    expect(exact).not.toMatch(/Seq Scan/)
    expect(await explain('do*')).not.toMatch(/Seq Scan/)
  })

  test('--limit 5 answers with the newest 5 rows', () => {
    const r = audit('--identity', 'user-*', '--limit', '5')
    expect(r.code).toBe(0)
    expect(ids(r.stdout)).toEqual([ROWS - 4, ROWS - 3, ROWS - 2, ROWS - 1, ROWS].map((g) => `big-${g}`))
    expect(r.stderr).toMatch(/more match/)
  })

  test('--limit 0 streams every row: the CLI runs in a heap far smaller than the answer', async () => {
    // A 48 MiB old space: a CLI that gathered the ~200 MiB answer (or the table) would die of it.
    const child = spawn(
      process.execPath,
      ['--max-old-space-size=48', cliMain(), 'audit', '--config', config, '--identity', 'user-*', '--limit', '0'],
      {
        cwd: ROOT,
      },
    )
    let bytes = 0
    let lines = 0
    let peakKiB = 0
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
    await new Promise<void>((resolve) => {
      child.stdout.on('data', (c: Buffer) => {
        bytes += c.length
        for (let i = c.indexOf(10); i >= 0; i = c.indexOf(10, i + 1)) lines++
        // Sampled while the child is alive (it cannot exit before its output is read).
        if (lines % 20_000 < 50) peakKiB = Math.max(peakKiB, peak(child.pid as number))
      })
      child.stdout.on('end', resolve)
    })
    expect(await exited).toBe(0)
    expect(stderr).toBe('')
    expect(lines).toBe(ROWS)
    expect(bytes).toBeGreaterThan(200 * 1024 * 1024)
    // The resident peak, for the record (docs/operations.md); the heap bound above is the assertion.
    expect(peakKiB).toBeGreaterThan(0)
    process.stdout.write(`audit --limit 0 over ${ROWS} rows: ${bytes} bytes out, peak RSS ${peakKiB} KiB\n`)
  }, 120_000)

  test('a summary over the table is grouped on the server', () => {
    const r = audit('--summary', '--by', 'tool', '--decision', 'throttled', '--limit', '2', '--format', 'csv')
    expect(r.code).toBe(0)
    expect(r.stdout).toBe('tool,throttled,total\r\ntool-0,4000,4000\r\ntool-10,4000,4000\r\n')
    expect(r.stderr).toMatch(/showing the 2 largest of 6 groups/)
  })
})

/** The peak resident set (VmHWM) of a running process, in KiB. */
function peak(pid: number): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m === null ? 0 : Number(m[1])
  } catch {
    return 0
  }
}
