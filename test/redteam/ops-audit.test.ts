/**
 * Red team (ops): `wardline audit` over JSONL and Postgres, and audit retention. Each test is an
 * attack: the same filter must give the same answer from both sources, retention must never delete a
 * row younger than retention_days, and a query must not hold the database back for others.
 */
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import type { Pool } from 'pg'
import { type AuditEntry, toJsonLines } from '../../src/audit/entry'
import { PostgresAuditSink } from '../../src/audit/postgres-sink'
import { buildFilter, parseTime } from '../../src/audit/query'
import { jsonlRows } from '../../src/audit/query-jsonl'
import { AuditDatabase, entriesQuery } from '../../src/audit/query-postgres'
import { auditRetention } from '../../src/audit/retention'
import { type AuditOptions, auditCommand } from '../../src/cli/audit'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { auditEntry } from '../helpers/audit-entry'
import { tempDir } from '../helpers/harness'
import { type TestDatabase, freshDatabase, testPool } from '../helpers/postgres'

const dir = tempDir('wardline-redteam-ops-audit-')
const NOW = Date.now()
const ago = (minutes: number): string => new Date(NOW - minutes * 60_000).toISOString()

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 3)
  await migrate(pool, silentLogger())
})

afterAll(async () => {
  await pool.end()
  await db.drop()
})

beforeEach(async () => {
  await pool.query('TRUNCATE audit_entries')
})

/** Runs the command in process, as the CLI would, and collects stdout, stderr and the status. */
async function audit(opts: Partial<AuditOptions>): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough()
  const stderr = new PassThrough()
  let out = ''
  let err = ''
  stdout.on('data', (c: Buffer) => (out += c.toString('utf8')))
  stderr.on('data', (c: Buffer) => (err += c.toString('utf8')))
  const code = await auditCommand({ config: join(dir, 'none.yaml'), ...opts }, { stdout, stderr, now: () => NOW })
  return { code, stdout: out, stderr: err }
}

/** A config that reads the trail from `dsn` (Postgres storage). */
function pgConfig(name: string, dsn: string): string {
  const path = join(dir, name)
  writeFileSync(
    path,
    `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(dsn)} }\naudit: { output: null }\n`,
  )
  return path
}

/** The entries, in both places: a JSONL file and the table (through the gateway's own sink). */
async function both(name: string, entries: AuditEntry[]): Promise<{ file: string; config: string }> {
  const file = join(dir, `${name}.jsonl`)
  writeFileSync(file, toJsonLines(entries))
  await new PostgresAuditSink(pool).write(entries)
  return { file, config: pgConfig(`${name}.yaml`, db.url) }
}

describe('JSONL and Postgres give one answer', () => {
  test('summary groups tied on their count come in the same order (UTF-16 vs byte order of U+FF01 and U+1F600)', async () => {
    // JavaScript's < compares UTF-16 code units: "\u{1F600}" (surrogates D83D…) sorts before "\uFF01";
    // COLLATE "C" compares UTF-8 bytes: EF BC 81 (U+FF01) sorts before F0 9F 98 80 (U+1F600).
    const { file, config } = await both('tie', [
      auditEntry('t1', { timestamp: ago(3), identity: '\uFF01bang' }),
      auditEntry('t2', { timestamp: ago(2), identity: '\u{1F600}smile' }),
    ])
    const args = { summary: true, by: 'identity', format: 'jsonl', since: '1h' }
    const fromFile = await audit({ ...args, file })
    const fromTable = await audit({ ...args, config })
    expect(fromTable.code).toBe(0)
    expect(fromFile.stdout).toBe(fromTable.stdout)
    // And --limit 1 picks the same group from both.
    expect((await audit({ ...args, file, limit: '1' })).stdout).toBe((await audit({ ...args, config, limit: '1' })).stdout)
  })

  test('an identity holding NUL is found by a glob in both sources; the table holds U+FFFD in its place', async () => {
    const { file, config } = await both('nul', [auditEntry('n1', { timestamp: ago(1), identity: 'ev\u0000il' })])
    const fromFile = await audit({ file, identity: 'ev*il', format: 'jsonl' })
    const fromTable = await audit({ config, identity: 'ev*il', format: 'jsonl' })
    expect((JSON.parse(fromFile.stdout) as AuditEntry).identity).toBe('ev\u0000il')
    // The Postgres sink replaced the NUL (text cannot hold one): documented in docs/operations.md#audit-cli.
    expect((JSON.parse(fromTable.stdout) as AuditEntry).identity).toBe('ev\uFFFDil')
    // An operator who types the replacement character finds it in the table only; `*` finds both.
    expect((await audit({ config, identity: 'ev\uFFFDil', format: 'jsonl' })).stdout).not.toBe('')
  })

  test('a database whose DateStyle and TimeZone are not ISO/UTC gives the same timestamps and the same rows', async () => {
    const entries = [
      auditEntry('d1', { timestamp: ago(120) }),
      auditEntry('d2', { timestamp: ago(61) }),
      auditEntry('d3', { timestamp: ago(59) }),
    ]
    const { file } = await both('datestyle', entries)
    const dsn = new URL(db.url)
    dsn.searchParams.set('options', '-c DateStyle=SQL,DMY -c TimeZone=America/St_Johns')
    const config = pgConfig('datestyle.yaml', dsn.toString())
    const fromFile = await audit({ file, since: '1h', format: 'jsonl' })
    const fromTable = await audit({ config, since: '1h', format: 'jsonl' })
    expect(fromTable.stderr).toBe('')
    expect(fromTable.stdout).toBe(fromFile.stdout)
    expect(fromTable.stdout).toContain('"request_id":"d3"')
    expect(fromTable.stdout).not.toContain('"request_id":"d2"')
  })

  test('like-special and glob-special characters in a glob are literal in both sources', async () => {
    const { file, config } = await both('special', [
      auditEntry('s1', { timestamp: ago(4), identity: 'a!%_\\b', tool: 'x' }),
      auditEntry('s2', { timestamp: ago(3), identity: 'a!xyz\\b', tool: 'x' }),
      auditEntry('s3', { timestamp: ago(2), identity: 'A!%_\\B', tool: 'x' }),
      auditEntry('s4', { timestamp: ago(1), identity: 'ÅLICE', tool: 'x' }),
    ])
    for (const identity of ['a!%_\\*', '*%_*', 'a!%_\\b', '*\\b', 'å*', 'Å*', '*_*', '*!*']) {
      const fromFile = await audit({ file, identity, format: 'jsonl' })
      const fromTable = await audit({ config, identity, format: 'jsonl' })
      expect({ identity, out: fromTable.stdout }).toEqual({ identity, out: fromFile.stdout })
    }
  })
})

describe('a caller-controlled tool longer than a B-tree entry', () => {
  // A resources/read of a long data: URI, or a hostile tools/call: the target is bounded only by
  // max_body_bytes. Migration 005 indexed the whole tool, and a B-tree entry holds 2704 bytes: the
  // insert failed with SQLSTATE 54000 (not a rejection), so the batch and every later one spilled.
  const long = `data:text/plain;base64,${randomBytes(3000).toString('base64')}`

  test('a batch holding a 4 KB target is written whole, beside ordinary entries', async () => {
    await new PostgresAuditSink(pool).write([
      auditEntry('before', { timestamp: ago(3) }),
      auditEntry('long', { timestamp: ago(2), method: 'resources/read', tool: long }),
      auditEntry('after', { timestamp: ago(1) }),
    ])
    const r = await pool.query<{ request_id: string }>('SELECT request_id FROM audit_entries ORDER BY id')
    expect(r.rows.map((row) => row.request_id)).toEqual(['before', 'long', 'after'])
  })

  test('it is found by its exact value and by a glob on its head, from both sources alike', async () => {
    const { file, config } = await both('long', [
      auditEntry('l1', { timestamp: ago(3), tool: long }),
      auditEntry('l2', { timestamp: ago(2), tool: `${long}x` }),
      auditEntry('l3', { timestamp: ago(1), tool: long.slice(0, 250) }),
    ])
    for (const tool of [long, `${long.slice(0, 300)}*`, `${long.slice(0, 100)}*x`, long.slice(0, 250), `*${long.slice(-20)}`]) {
      const fromFile = await audit({ file, tool, format: 'jsonl' })
      const fromTable = await audit({ config, tool, format: 'jsonl' })
      expect(fromTable.stderr).toBe('')
      expect(fromTable.stdout).toBe(fromFile.stdout)
      expect(fromTable.stdout).not.toBe('')
    }
  })

  test('an exact tool query can read the prefix index backwards, in time order', async () => {
    await pool.query(`INSERT INTO audit_entries (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms)
      SELECT 'g' || g, now() - make_interval(secs => g), 'u' || (g % 50), 'acme', 'tools/call', 'tool-' || (g % 100), 'allow', 200, 1
        FROM generate_series(1, 20000) AS g`)
    await pool.query('ANALYZE audit_entries')
    const sql = entriesQuery(buildFilter({ tool: 'tool-42' }, Date.now()), 100)
    // 200 rows of 20 000: the planner may rightly take a bitmap scan and a sort; without bitmaps, the
    // prefix index must still give the rows newest first by itself (no Sort under the Limit).
    const client = await pool.connect()
    let plan: string
    try {
      await client.query('SET enable_bitmapscan = off')
      plan = (await client.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN ${sql.text}`, values: sql.values as unknown[] })).rows
        .map((r) => r['QUERY PLAN'])
        .join('\n')
    } finally {
      client.release(true)
    }
    expect(plan).toContain('Index Scan Backward using audit_entries_tool_time')
    expect(plan).not.toContain('Seq Scan')
  })
})

describe('a JSONL file not written by the gateway', () => {
  test("timestamps without a zone, or in prose, are skipped and counted, not read in the shell's zone", async () => {
    const file = join(dir, 'zoneless.jsonl')
    const good = auditEntry('good', { timestamp: ago(5) })
    const zoneless = { ...auditEntry('zoneless'), timestamp: ago(4).replace('Z', '') }
    const prose = { ...auditEntry('prose'), timestamp: new Date(Date.parse(ago(3))).toString() }
    writeFileSync(file, [good, zoneless, prose].map((e) => JSON.stringify(e)).join('\n') + '\n')
    const r = await audit({ file, since: '1h', format: 'jsonl' })
    expect(r.code).toBe(0)
    expect(r.stdout).toBe(toJsonLines([good]))
    expect(r.stderr).toBe(`wardline audit: ${file}: skipped 2 lines that are not audit entries\n`)
  })
})

describe('a JSONL trail is in completion order, not arrival order', () => {
  // An entry is written when its request ends, stamped with when it arrived: a long call (a stream, a
  // slow tool) that arrived first is written after calls that arrived later. The table orders by
  // "timestamp"; the file must give the same newest N.
  test('--limit N gives the newest N by timestamp from both sources, printed oldest first', async () => {
    const { file, config } = await both('completion', [
      auditEntry('quick-late', { timestamp: ago(2) }),
      auditEntry('quick-later', { timestamp: ago(1) }),
      auditEntry('slow-early', { timestamp: ago(10) }), // arrived first, finished last
    ])
    for (const limit of ['1', '2', '3']) {
      const fromFile = await audit({ file, limit, format: 'jsonl' })
      const fromTable = await audit({ config, limit, format: 'jsonl' })
      expect({ limit, out: fromFile.stdout, err: fromFile.stderr }).toEqual({ limit, out: fromTable.stdout, err: fromTable.stderr })
    }
    const ids = (await audit({ file, limit: '2', format: 'jsonl' })).stdout.match(/"request_id":"[\w-]+"/g)
    expect(ids).toEqual(['"request_id":"quick-late"', '"request_id":"quick-later"'])
  })
})

describe('the newest N of a shuffled file', () => {
  test('2000 entries in random order, many on one millisecond: the same N as a full sort by (timestamp, line)', async () => {
    const base = Date.parse(ago(600))
    const entries = Array.from({ length: 2000 }, (_, i) =>
      auditEntry(`s${i}`, { timestamp: new Date(base + Math.floor(Math.random() * 300) * 1000).toISOString() }),
    )
    const file = join(dir, 'shuffled.jsonl')
    writeFileSync(file, toJsonLines(entries))
    const sorted = entries
      .map((e, n) => ({ e, n, ms: Date.parse(e.timestamp) }))
      .sort((a, b) => a.ms - b.ms || a.n - b.n)
      .map((x) => x.e.request_id)
    for (const limit of [1, 37, 1999, 2000, 2500]) {
      const found = { more: false }
      const got: string[] = []
      for await (const e of jsonlRows(file, buildFilter({}, NOW), limit, { malformed: 0, tooLong: 0 }, found)) got.push(e.request_id)
      expect(got).toEqual(sorted.slice(-limit))
      expect(found.more).toBe(limit < 2000)
    }
  })
})

describe('--since and --until', () => {
  const now = Date.parse('2026-12-01T12:00:00Z')

  test('a time as psql prints it (+01, hours only) is read with its offset', () => {
    expect(new Date(parseTime('--since', '2026-12-01 09:30:00+01', now)).toISOString()).toBe('2026-12-01T08:30:00.000Z')
    expect(new Date(parseTime('--since', '2026-12-01 09:30:00.25-03', now)).toISOString()).toBe('2026-12-01T12:30:00.250Z')
  })

  test('a leap second, hour 24 and year 10000 are refused with the flag named, exit 1', async () => {
    for (const text of ['2016-12-31T23:59:60Z', '2026-12-01T24:00:00Z', '10000-01-01']) {
      expect(() => parseTime('--until', text, now)).toThrow(`--until ${text}: `)
      const r = await audit({ file: join(dir, 'absent.jsonl'), until: text })
      expect(r.code).toBe(1)
      expect(r.stderr).toMatch(new RegExp(`^wardline audit: --until ${text.replace(/[.+]/g, '\\$&')}: .+\n$`))
    }
  })

  test('offsets across a DST change select the same instant as Z', () => {
    // 2026-03-29 02:30 does not exist in Europe/Berlin; with an explicit offset it is still one instant.
    expect(parseTime('--since', '2026-03-29T02:30:00+01:00', now)).toBe(Date.parse('2026-03-29T01:30:00Z'))
    expect(parseTime('--since', '2026-10-25T02:30:00+02:00', now)).toBe(Date.parse('2026-10-25T00:30:00Z'))
    expect(parseTime('--since', '2026-10-25T02:30:00+01:00', now)).toBe(Date.parse('2026-10-25T01:30:00Z'))
  })

  test('[since, until) at the millisecond, from both sources', async () => {
    const t = Date.parse(ago(30))
    const at = (ms: number): string => new Date(ms).toISOString()
    const { file, config } = await both('edges', [
      auditEntry('e1', { timestamp: at(t - 1) }),
      auditEntry('e2', { timestamp: at(t) }),
      auditEntry('e3', { timestamp: at(t + 999) }),
      auditEntry('e4', { timestamp: at(t + 1000) }),
    ])
    const args = { since: at(t), until: at(t + 1000), format: 'jsonl' }
    const fromFile = await audit({ ...args, file })
    const fromTable = await audit({ ...args, config })
    expect(fromTable.stdout).toBe(fromFile.stdout)
    expect(fromFile.stdout.match(/"request_id":"(e\d)"/g)).toEqual(['"request_id":"e2"', '"request_id":"e3"'])
    expect(buildFilter({ since: at(t) }, NOW).sinceMs).toBe(t)
  })
})

describe('retention', () => {
  /** One row at `ms`. */
  /** A row as a replica writes it at `ms`; the database received it then too, unless `arrivedNow` (a replica whose clock is behind). */
  async function row(id: string, ms: number, arrivedNow = false): Promise<void> {
    await new PostgresAuditSink(pool).write([auditEntry(id, { timestamp: new Date(ms).toISOString() })])
    if (!arrivedNow) await pool.query('UPDATE audit_entries SET recorded_at = "timestamp" WHERE request_id = $1', [id])
  }

  test('a database in a zone with DST never deletes a row younger than retention_days × 24 h', async () => {
    // Spring forward in Europe/Berlin: "now − 30 days" computed in that zone is 23 h per day for one of them.
    const now = Date.parse('2026-04-10T10:00:00Z')
    const HOUR = 3_600_000
    await row('young', now - 30 * 24 * HOUR + HOUR / 2) // 29 d 23 h 30 min old: kept
    await row('old', now - 30 * 24 * HOUR - HOUR / 2) // 30 d 0 h 30 min old: deleted
    const berlin = testPool(db.url, 1, { options: '-c TimeZone=Europe/Berlin' })
    try {
      const worker = auditRetention(berlin, silentLogger(), 30, { clock: () => new Date(now) })
      expect(await worker.runOnce()).toEqual({ ran: true, deleted: 1, backlog: false })
      const left = await pool.query<{ request_id: string }>('SELECT request_id FROM audit_entries')
      expect(left.rows.map((r) => r.request_id)).toEqual(['young'])
      await worker.close()
    } finally {
      await berlin.end()
    }
  })

  test('a row exactly retention_days old is kept; one a millisecond older is deleted', async () => {
    const now = Date.parse('2026-07-01T00:00:00Z')
    await row('exact', now - 7 * 86_400_000)
    await row('older', now - 7 * 86_400_000 - 1)
    const worker = auditRetention(pool, silentLogger(), 7, { clock: () => new Date(now) })
    expect((await worker.runOnce()).deleted).toBe(1)
    const left = await pool.query<{ request_id: string }>('SELECT request_id FROM audit_entries')
    expect(left.rows.map((r) => r.request_id)).toEqual(['exact'])
  })

  // Fixed: retention compared only "timestamp", which the gateway's clock wrote, with the database's
  // clock, so a replica whose clock is behind by more than retention_days (an RTC reset, a VM restored
  // from a snapshot with NTP off) had the audit of calls made minutes ago deleted on the next run. It
  // now also requires recorded_at (the database's clock at insert) to be that old.
  test('a row written minutes ago by a replica whose clock is 40 days behind is not deleted', async () => {
    await row('skewed', Date.now() - 40 * 86_400_000, true) // recorded_at: now, on the database's clock
    const worker = auditRetention(pool, silentLogger(), 30)
    expect(await worker.runOnce()).toEqual({ ran: true, deleted: 0, backlog: false })
  })

  test('retention runs while an audit query holds its cursor open: the query sees its snapshot, retention is not blocked', async () => {
    const old = Date.now() - 40 * 86_400_000
    const rows = Array.from({ length: 1200 }, (_, i) => auditEntry(`c${i}`, { timestamp: new Date(old + i).toISOString() }))
    await new PostgresAuditSink(pool).write(rows)
    await pool.query('UPDATE audit_entries SET recorded_at = "timestamp"')
    const reader = await AuditDatabase.open(db.url, 'test', () => undefined)
    try {
      const found = { more: false }
      const it = reader.entries(buildFilter({}, Date.now()), 0, found)[Symbol.asyncIterator]()
      const first = await it.next() // the cursor is open, in its transaction
      expect(first.done).toBe(false)
      const worker = auditRetention(pool, silentLogger(), 30)
      expect(await worker.runOnce()).toEqual({ ran: true, deleted: 1200, backlog: false })
      let n = 1
      while (!(await it.next()).done) n++
      expect(n).toBe(1200) // the query's snapshot kept every row it started with
    } finally {
      await reader.close()
    }
  })
})

describe('an audit query does not hold the database back', () => {
  test('a reader that stops reading (a pager) does not keep its transaction open for ever', async () => {
    const old = Date.now() - 60_000
    await new PostgresAuditSink(pool).write(
      Array.from({ length: 600 }, (_, i) => auditEntry(`p${i}`, { timestamp: new Date(old + i).toISOString() })),
    )
    const reader = await AuditDatabase.open(db.url, 'test', () => undefined)
    try {
      const setting = reader.rows<{ v: string }>({ text: `SELECT current_setting('idle_in_transaction_session_timeout') AS v`, values: [] })
      const v = (await setting.next()).value as { v: string }
      await setting.return(undefined)
      // Without a bound a paused `wardline audit --limit 0 | less` holds a snapshot: vacuum of every
      // table (budget_buckets churns) waits for it.
      expect(v.v).not.toBe('0')
    } finally {
      await reader.close()
    }
  })
})
