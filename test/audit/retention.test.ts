/**
 * audit.retention_days: old audit_entries rows deleted in bounded batches by one replica at a time,
 * on real Postgres; and the key's config rules.
 */
import type { Pool } from 'pg'
import { RETENTION_LOCK, auditRetention } from '../../src/audit/retention'
import { parseConfig } from '../../src/config/load'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import { silentLogger } from '../../src/log'
import { AuditMetrics } from '../../src/audit/metrics'
import { migrate } from '../../src/postgres/migrate'
import { type TestDatabase, freshDatabase, testPool } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'

let db: TestDatabase
let pools: Pool[]

beforeAll(async () => {
  db = await freshDatabase()
  pools = Array.from({ length: 3 }, () => testPool(db.url, 2))
  await migrate(pools[0], silentLogger())
})

afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()))
  await db.drop()
})

beforeEach(async () => {
  await pools[0].query('TRUNCATE audit_entries')
})

/** `n` rows `daysAgo` days before now, request ids `<prefix>-1`… */
async function insert(prefix: string, n: number, daysAgo: number): Promise<void> {
  await pools[0].query(
    `INSERT INTO audit_entries (request_id, "timestamp", recorded_at, identity, tenant, method, tool, decision, status, latency_ms)
     SELECT $1 || '-' || g, now() - make_interval(days => $2), now() - make_interval(days => $2), 'alice', 'acme', 'tools/call', 'echo', 'allow', 200, 1
       FROM generate_series(1, $3) AS g`,
    [prefix, daysAgo, n],
  )
}

async function count(prefix: string): Promise<number> {
  const r = await pools[0].query<{ n: number }>('SELECT count(*)::int AS n FROM audit_entries WHERE request_id LIKE $1', [`${prefix}-%`])
  return r.rows[0].n
}

test('deletes rows older than the retention in bounded batches and keeps the newer ones', async () => {
  await insert('old', 25, 40)
  await insert('edge', 3, 29) // inside a 30-day retention
  await insert('new', 5, 0)
  const deleted: number[] = []
  const worker = auditRetention(pools[1], silentLogger(), 30, { batchSize: 10, maxBatches: 2, onDeleted: (n) => deleted.push(n) })
  expect(await worker.runOnce()).toEqual({ ran: true, deleted: 20, backlog: true }) // two batches of ten, then the run stops
  expect(await worker.runOnce()).toEqual({ ran: true, deleted: 5, backlog: false })
  expect(await worker.runOnce()).toEqual({ ran: true, deleted: 0, backlog: false })
  expect(deleted).toEqual([20, 5])
  expect([await count('old'), await count('edge'), await count('new')]).toEqual([0, 3, 5])
  await worker.close()
})

test('the cutoff moves with the clock: an injected one a week ahead deletes what will be old then', async () => {
  await insert('older', 4, 25)
  await insert('fresh', 2, 0)
  const weekAhead = (): Date => new Date(Date.now() + 7 * 86_400_000)
  const worker = auditRetention(pools[1], silentLogger(), 30, { clock: weekAhead })
  expect((await worker.runOnce()).deleted).toBe(4)
  expect(await count('fresh')).toBe(2)
})

test('two workers on one database: while one runs, the other skips its turn', async () => {
  await insert('old', 30, 60)
  // Worker A's delete waits behind a row lock another session holds, with A's advisory lock taken.
  const blocker = await pools[2].connect()
  await blocker.query('BEGIN')
  await blocker.query(`SELECT 1 FROM audit_entries WHERE request_id = 'old-1' FOR UPDATE`)
  const a = auditRetention(pools[0], silentLogger(), 30)
  const b = auditRetention(pools[1], silentLogger(), 30)
  try {
    const runA = a.runOnce()
    // Until A holds the lock, B may still win it: wait until the database shows A waiting on the row lock.
    await waitFor(
      async () =>
        (
          await pools[2].query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted`,
            [RETENTION_LOCK],
          )
        ).rows[0].n === 1,
      { what: 'worker A to hold the retention lock' },
    )
    expect(await b.runOnce()).toEqual({ ran: false, deleted: 0, backlog: false })
    await blocker.query('COMMIT')
    expect(await runA).toEqual({ ran: true, deleted: 30, backlog: false })
    expect((await b.runOnce()).ran).toBe(true)
  } finally {
    blocker.release()
    await a.close()
    await b.close()
  }
})

test('retention and the budget reaper have their own locks: one never skips for the other', async () => {
  await insert('old', 3, 60)
  const holder = await pools[2].connect()
  try {
    await holder.query('SELECT pg_advisory_lock($1)', [0x776c7270]) // the budget reaper's
    expect((await auditRetention(pools[1], silentLogger(), 30).runOnce()).deleted).toBe(3)
  } finally {
    await holder.query('SELECT pg_advisory_unlock($1)', [0x776c7270])
    holder.release()
  }
})

test('the metric is exported', async () => {
  const metrics = new AuditMetrics()
  metrics.auditRetentionDeleted.inc(3)
  expect(await metrics.registry.metrics()).toMatch(/^wardline_audit_retention_deleted_total 3$/m)
})

describe('audit.retention_days in the config', () => {
  const base = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'
  const pg = `${base}features: { postgres_storage: true }\npostgres: { dsn: "postgres://localhost/x" }\n`

  test('absent or null keeps everything; a whole number of days ≥ 1 is read', () => {
    expect(parseConfig(`${pg}audit: { output: null }\n`).audit.retentionDays).toBeNull()
    expect(parseConfig(`${pg}audit: { output: null, retention_days: null }\n`).audit.retentionDays).toBeNull()
    expect(parseConfig(`${pg}audit: { output: null, retention_days: 90 }\n`).audit.retentionDays).toBe(90)
  })

  test.each([['0'], ['-3'], ['1.5'], ['"30"'], ['36501']])('retention_days: %s is refused with its path', (value) => {
    expect(() => parseConfig(`${pg}audit: { output: null, retention_days: ${value} }\n`)).toThrow(/audit\.retention_days: /)
  })

  test('with a JSONL trail only it is a config error that says to rotate the file instead', () => {
    expect(() => parseConfig(`${base}audit: { output: a.jsonl, retention_days: 30 }\n`)).toThrow(
      /audit\.retention_days: applies only to the Postgres audit_entries table .*rotate a JSONL audit file with logrotate/,
    )
  })

  test('a reload that changes it reports that a restart is needed (audit is a restart key)', () => {
    const before = parseConfig(`${pg}audit: { output: null, retention_days: 30 }\n`)
    const after = parseConfig(`${pg}audit: { output: null, retention_days: 7 }\n`)
    expect(keysNeedingRestart(before, after)).toEqual(['audit'])
  })
})
