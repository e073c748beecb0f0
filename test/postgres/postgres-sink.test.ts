import { appendFileSync, existsSync, readFileSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { Pool } from 'pg'
import type { AuditEntry } from '../../src/audit/entry'
import { PostgresAuditSink } from '../../src/audit/postgres-sink'
import { AuditSpill } from '../../src/audit/spill'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { tempDir } from '../helpers/harness'
import { freshDatabase, type TestDatabase, testPool, withClient } from '../helpers/postgres'
import { auditSinkContract } from '../audit/sink-contract'
import { auditEntry } from '../helpers/audit-entry'

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 2)
  await migrate(pool, silentLogger())
})

afterAll(async () => {
  await pool.end()
  await db.drop()
})

/** The shared fixture with a millisecond timestamp and a fractional latency, which the row must keep exactly. */
function entry(id: string, extra: Partial<AuditEntry> = {}): AuditEntry {
  return auditEntry(id, { timestamp: '2025-01-02T03:04:05.678Z', latency_ms: 1.25, ...extra })
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
  const rows = await pool.query<{ request_id: string }>(
    "SELECT request_id FROM audit_entries WHERE request_id LIKE 'd-%' ORDER BY request_id",
  )
  expect(rows.rows.map((r) => r.request_id)).toEqual(['d-1', 'd-2', 'd-3', 'd-4'])
})

test('a spill replay quarantines a line torn by a crash once and keeps the file when the sink fails', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  spill.append([entry('s-1'), entry('s-2')])
  appendFileSync(spill.path, '{"timestamp":"2025-01-02T03:0')
  const bad: string[] = []
  const hooks = { onRejected: (line: string) => bad.push(line) }
  await expect(spill.replay(() => Promise.reject(new Error('database down')), 10, hooks)).rejects.toThrow('database down')
  expect(spill.hasEntries).toBe(true)
  const sink = new PostgresAuditSink(pool)
  expect(await spill.replay((b) => sink.write(b), 10, hooks)).toBe(2)
  // Quarantined once, although two replays read it.
  expect(bad).toEqual(['{"timestamp":"2025-01-02T03:0'])
  expect(readFileSync(spill.rejectedPath, 'utf8')).toBe('{"timestamp":"2025-01-02T03:0\n')
  expect(spill.hasEntries).toBe(false)
  const rows = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_entries WHERE request_id LIKE 's-%'")
  expect(rows.rows[0].n).toBe(2)
})

test('NUL characters in any text field are stored as U+FFFD instead of failing the batch', async () => {
  const sink = new PostgresAuditSink(pool)
  const nul = entry('n-\u0000-1', {
    identity: 'al\u0000ice',
    tenant: 'ac\u0000me',
    method: 'tools/\u0000call',
    tool: 'ec\u0000ho',
    reason: 'invalid JSON: Unexpected token \u0000 in JSON at position 3',
    session_id: 's\u0000',
  })
  await sink.write([entry('n-ok-1'), nul, entry('n-ok-2')])
  const rows = await pool.query<{ request_id: string; [column: string]: string | null }>(
    "SELECT request_id, identity, tenant, method, tool, reason, session_id FROM audit_entries WHERE request_id LIKE 'n-%' ORDER BY id",
  )
  expect(rows.rows.map((r) => r.request_id)).toEqual(['n-ok-1', 'n-\uFFFD-1', 'n-ok-2'])
  expect(rows.rows[1]).toEqual({
    request_id: 'n-\uFFFD-1',
    identity: 'al\uFFFDice',
    tenant: 'ac\uFFFDme',
    method: 'tools/\uFFFDcall',
    tool: 'ec\uFFFDho',
    reason: 'invalid JSON: Unexpected token \uFFFD in JSON at position 3',
    session_id: 's\uFFFD',
  })
})

test('a replay moves lines the database refuses on their own to the quarantine file and writes the rest of the backlog', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  const sink = new PostgresAuditSink(pool)
  const refused = { ...entry('q-bad-time'), timestamp: 'not a time' }
  const { identity: _identity, ...missing } = entry('q-no-identity')
  spill.append([entry('q-1'), refused, entry('q-2', { method: 'tools/\u0000call' })])
  appendFileSync(spill.path, 'not json at all\n')
  spill.append([entry('q-3'), missing as AuditEntry, entry('q-4')])
  const rejected: Array<{ line: string; why: string }> = []
  const replayed = await spill.replay((b) => sink.write(b), 2, {
    isRejection: (err) => sink.rejects(err),
    onRejected: (line, why) => rejected.push({ line, why }),
  })
  expect(replayed).toBe(4)
  expect(spill.hasEntries).toBe(false)
  const rows = await pool.query<{ request_id: string }>(
    "SELECT request_id FROM audit_entries WHERE request_id LIKE 'q-%' ORDER BY request_id",
  )
  expect(rows.rows.map((r) => r.request_id)).toEqual(['q-1', 'q-2', 'q-3', 'q-4'])
  expect(rejected.map((r) => r.line)).toEqual([JSON.stringify(refused), 'not json at all', JSON.stringify(missing)])
  expect(rejected[0].why).toMatch(/refused by the sink: .*timestamp|time/i)
  expect(readFileSync(spill.rejectedPath, 'utf8').split('\n')).toEqual([
    JSON.stringify(refused),
    'not json at all',
    JSON.stringify(missing),
    '',
  ])
})

test('a replay stops, keeping the file, when the database is down rather than quarantining entries', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  const down = testPool('postgres://postgres@127.0.0.1:1/none', 1, { connectionTimeoutMillis: 500 })
  try {
    const sink = new PostgresAuditSink(down)
    spill.append([entry('x-1'), entry('x-2')])
    await expect(spill.replay((b) => sink.write(b), 1, { isRejection: (err) => sink.rejects(err) })).rejects.toThrow(/ECONNREFUSED/)
    expect(spill.hasEntries).toBe(true)
    expect(existsSync(spill.rejectedPath)).toBe(false)
  } finally {
    await down.end()
  }
})

test('entries appended after a line torn by a crash are replayed: the torn line stays a line of its own', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  spill.append([entry('t-1')])
  appendFileSync(spill.path, JSON.stringify(entry('t-torn')).slice(0, 40)) // the crash: half a line, no newline
  spill.append([entry('t-2'), entry('t-3')]) // the next run spills again
  const sink = new PostgresAuditSink(pool)
  const rejected: string[] = []
  expect(await spill.replay((b) => sink.write(b), 10, { onRejected: (line) => rejected.push(line) })).toBe(3)
  expect(rejected).toEqual([JSON.stringify(entry('t-torn')).slice(0, 40)])
  const rows = await pool.query<{ request_id: string }>(
    "SELECT request_id FROM audit_entries WHERE request_id LIKE 't-%' ORDER BY request_id",
  )
  expect(rows.rows.map((r) => r.request_id)).toEqual(['t-1', 't-2', 't-3'])
})

test('a replay streams the spill file: memory stays bounded by the batch, not the file size', async () => {
  const spill = new AuditSpill(join(tempDir(), 'spill.jsonl'))
  const reason = 'r'.repeat(400)
  const lines = 200_000 // about 100 MB of spill file
  const chunk: AuditEntry[] = Array.from({ length: 10_000 }, (_, i) => entry(`big-${i}`, { reason }))
  for (let i = 0; i < lines / chunk.length; i++) spill.append(chunk)
  // Live memory, measured after a full collection (gc exposed for this test only).
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const live = (): number => {
    gc()
    return process.memoryUsage().heapUsed
  }
  const baseline = live()
  let peak = 0
  let samples = 0
  let seen = 0
  const replayed = await spill.replay(async (batch) => {
    // A write takes a turn of the event loop, as a database round trip does: reading runs ahead if it can.
    await new Promise((resolve) => setImmediate(resolve))
    seen += batch.length
    if ((seen / batch.length) % 50 === 0) {
      samples++
      peak = Math.max(peak, live() - baseline)
    }
  }, 500)
  expect(replayed).toBe(lines)
  expect(seen).toBe(lines)
  // Reading it whole would hold the 100 MB text plus 200 000 parsed entries at once.
  expect(samples).toBeGreaterThan(0)
  expect(peak).toBeLessThan(16 * 1024 * 1024)
  rmSync(dirname(spill.path), { recursive: true, force: true }) // 100 MB: don't leave it in /tmp
}, 60_000)

/** The table's rows as entries, in insertion order, read on a connection of their own (committed rows only). */
async function tableEntries(): Promise<AuditEntry[]> {
  const rows = await withClient(db.url, (c) =>
    c.query(`SELECT request_id, to_char("timestamp" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS timestamp,
      identity, tenant, method, tool, decision, status, latency_ms, reason, session_id FROM audit_entries ORDER BY id`),
  )
  return rows.rows.map((r: Record<string, unknown>) => {
    const e: Record<string, unknown> = {
      timestamp: r.timestamp,
      request_id: r.request_id,
      identity: r.identity,
      tenant: r.tenant,
      method: r.method,
      tool: r.tool,
      decision: r.decision,
      status: r.status,
      latency_ms: r.latency_ms,
    }
    // NULL is how the table says "no such field" (the JSONL line leaves the key out).
    if (r.reason !== null) e.reason = r.reason
    if (r.session_id !== null) e.session_id = r.session_id
    return e as unknown as AuditEntry
  })
}

auditSinkContract(
  'PostgresAuditSink',
  { retriedEntry: 'once', refusesWritesAfterClose: false, reopen: 'absent', rejects: true, holds: 'nothing' },
  async () => {
    await pool.query('TRUNCATE audit_entries')
    return {
      sink: new PostgresAuditSink(pool),
      readBack: tableEntries,
      refusedEntry: auditEntry('refused', { timestamp: 'not a time' }),
      unavailableError: async () => {
        const down = testPool('postgres://postgres@127.0.0.1:1/none', 1, { connectionTimeoutMillis: 500 })
        try {
          return await new PostgresAuditSink(down).write([auditEntry('nowhere')]).then(
            () => null,
            (err: unknown) => err,
          )
        } finally {
          await down.end()
        }
      },
    }
  },
)
