import { appendFileSync } from 'node:fs'
import { join } from 'node:path'
import { Pool } from 'pg'
import type { AuditEntry } from '../../src/audit/entry'
import { PostgresAuditSink } from '../../src/audit/postgres-sink'
import { AuditSpill } from '../../src/audit/spill'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { tempDir } from '../helpers/harness'
import { freshDatabase, type TestDatabase } from '../helpers/postgres'

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  db = await freshDatabase()
  pool = new Pool({ connectionString: db.url, max: 2 })
  await migrate(pool, silentLogger())
})

afterAll(async () => {
  await pool.end()
  await db.drop()
})

function entry(id: string, extra: Partial<AuditEntry> = {}): AuditEntry {
  return { timestamp: '2025-01-02T03:04:05.678Z', request_id: id, identity: 'alice', tenant: 'acme', method: 'tools/call', tool: 'echo', decision: 'allow', status: 200, latency_ms: 1.25, ...extra }
}

test('a batch lands as rows whose columns mirror the JSONL fields, optional ones as NULL', async () => {
  const sink = new PostgresAuditSink(pool)
  await sink.write([entry('m-1'), entry('m-2', { decision: 'throttled', status: 429, reason: 'rate limit exceeded', session_id: 's-1' })])
  const rows = await pool.query(`SELECT request_id, to_char("timestamp" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS timestamp,
    identity, tenant, method, tool, decision, status, latency_ms, reason, session_id FROM audit_entries WHERE request_id LIKE 'm-%' ORDER BY id`)
  expect(rows.rows).toEqual([
    { ...entry('m-1'), reason: null, session_id: null },
    { ...entry('m-2'), decision: 'throttled', status: 429, reason: 'rate limit exceeded', session_id: 's-1' },
  ])
})

test('writing the same entries again (a retry after a timeout, a replay) adds no second row', async () => {
  const sink = new PostgresAuditSink(pool)
  const batch = [entry('d-1'), entry('d-2'), entry('d-3')]
  await sink.write(batch)
  await sink.write(batch)
  await sink.write([entry('d-2'), entry('d-4')])
  const rows = await pool.query<{ request_id: string }>("SELECT request_id FROM audit_entries WHERE request_id LIKE 'd-%' ORDER BY request_id")
  expect(rows.rows.map((r) => r.request_id)).toEqual(['d-1', 'd-2', 'd-3', 'd-4'])
})

test('a spill replay skips a line torn by a crash and keeps the file when the sink fails', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  spill.append([entry('s-1'), entry('s-2')])
  appendFileSync(spill.path, '{"timestamp":"2025-01-02T03:0')
  const bad: string[] = []
  await expect(spill.replay(async () => { throw new Error('database down') }, 10)).rejects.toThrow('database down')
  expect(spill.hasEntries).toBe(true)
  const sink = new PostgresAuditSink(pool)
  expect(await spill.replay((b) => sink.write(b), 10, (line) => bad.push(line))).toBe(2)
  expect(bad).toHaveLength(1)
  expect(spill.hasEntries).toBe(false)
  const rows = await pool.query("SELECT count(*)::int AS n FROM audit_entries WHERE request_id LIKE 's-%'")
  expect(rows.rows[0].n).toBe(2)
})
