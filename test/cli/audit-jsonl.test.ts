/**
 * `wardline audit` over a JSONL trail, run as an operator runs it (a child process; stdout is a pipe,
 * so the default format is JSONL).
 */
import { spawn } from 'node:child_process'
import { writeFileSync, appendFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { type AuditEntry, toJsonLines } from '../../src/audit/entry'
import { csvField, defaultFormat } from '../../src/audit/query-format'
import { terminalSafe } from '../../src/terminal-table'
import { buildFilter, parseTime } from '../../src/audit/query'
import { jsonlSummary } from '../../src/audit/query-jsonl'
import { auditEntry, sampleTrail } from '../helpers/audit-entry'
import { ROOT, cliMain, runCli } from '../helpers/cli'
import { tempDir } from '../helpers/harness'

const dir = tempDir('wardline-audit-')
const trail = join(dir, 'audit.jsonl')
const now = Date.now()
const ago = (minutes: number): string => new Date(now - minutes * 60_000).toISOString()

/** The trail every test reads (helpers/audit-entry.ts sampleTrail). */
const ENTRIES: AuditEntry[] = sampleTrail(ago)
writeFileSync(trail, toJsonLines(ENTRIES))
const config = join(dir, 'wardline.yaml')
writeFileSync(config, `upstream: http://127.0.0.1:3001\nauth: { mode: header }\naudit: { output: ${JSON.stringify(trail)} }\n`)

function audit(...args: string[]): { code: number; stdout: string; stderr: string } {
  return runCli(['audit', '--config', config, ...args])
}

/** The request ids of a JSONL answer, in order. */
function ids(stdout: string): string[] {
  return stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (JSON.parse(l) as AuditEntry).request_id)
}

describe('filters', () => {
  test('piped, the answer is JSONL, byte for byte the lines the gateway wrote, oldest first', () => {
    const r = audit('--limit', '0')
    expect(r).toMatchObject({ code: 0, stderr: '' })
    expect(r.stdout).toBe(toJsonLines(ENTRIES))
  })

  test('an identity glob selects as a policy rule would: * only, everything else literal', () => {
    expect(ids(audit('--identity', 'alice').stdout)).toEqual(['r1', 'r3', 'r7'])
    expect(ids(audit('--identity', 'ali*').stdout)).toEqual(['r1', 'r3', 'r4', 'r7'])
    expect(ids(audit('--identity', '*ia').stdout)).toEqual(['r4'])
    // % and _ are not wildcards: 'axbyc' does not match 'a%b_c'.
    expect(ids(audit('--identity', 'a%b_c').stdout)).toEqual(['r5'])
    expect(ids(audit('--identity', 'a%b*').stdout)).toEqual(['r5'])
    // The empty identity (unauthenticated requests) can be asked for.
    expect(ids(audit('--identity', '').stdout)).toEqual(['r8'])
  })

  test('--since today and yesterday start at 00:00 UTC of that day; --until today ends yesterday', () => {
    const day = 86_400_000
    const midnight = Math.floor(Date.now() / day) * day
    const arrivedIn = (from: number, to: number): string[] =>
      ENTRIES.filter((e) => Date.parse(e.timestamp) >= from && Date.parse(e.timestamp) < to).map((e) => e.request_id)
    expect(ids(audit('--since', 'today').stdout)).toEqual(arrivedIn(midnight, Infinity))
    expect(ids(audit('--since', 'yesterday', '--until', 'today').stdout)).toEqual(arrivedIn(midnight - day, midnight))
    // Every entry is less than 3 hours old, so since yesterday's 00:00 UTC holds them all.
    expect(ids(audit('--since', 'Yesterday').stdout)).toEqual(ENTRIES.map((e) => e.request_id))
  })

  test('tenant, tool and decision (a comma list) combine with AND', () => {
    expect(ids(audit('--tenant', 'globex').stdout)).toEqual(['r2'])
    expect(ids(audit('--tool', 'delete_*').stdout)).toEqual(['r3'])
    expect(ids(audit('--decision', 'throttled,deny').stdout)).toEqual(['r2', 'r3', 'r7'])
    expect(ids(audit('--decision', 'throttled', '--identity', 'alice').stdout)).toEqual(['r7'])
  })

  test('--reason-code selects entries by their code (a comma list); an ordinary allow has none', () => {
    expect(ids(audit('--reason-code', 'policy.denied').stdout)).toEqual(['r3'])
    expect(ids(audit('--reason-code', 'budget.exceeded, budget.repeat').stdout)).toEqual(['r2', 'r7'])
    expect(ids(audit('--reason-code', 'budget.repeat', '--identity', 'bob').stdout)).toEqual([])
    const bad = audit('--reason-code', 'budget.exceded')
    expect(bad.code).toBe(1)
    expect(bad.stderr).toMatch(/--reason-code budget\.exceded: "budget\.exceded" is not a reason code \(one or more of http\.host, /)
  })

  test('--server selects entries of requests routed to a matching server; an entry without one never matches', () => {
    expect(ids(audit('--server', 'docs').stdout)).toEqual(['r3', 'r4'])
    expect(ids(audit('--server', 'd*').stdout)).toEqual(['r3', 'r4'])
    expect(ids(audit('--server', '*').stdout)).toEqual(['r3', 'r4', 'r6'])
    expect(ids(audit('--server', 'tickets', '--identity', 'axbyc').stdout)).toEqual(['r6'])
    expect(ids(audit('--server', 'Docs').stdout)).toEqual([])
    // The line as the gateway wrote it, the server last.
    expect(audit('--server', 'tickets').stdout).toMatch(/,"server":"tickets"\}\n$/)
  })

  test('--since and --until take durations and ISO 8601 times: [since, until)', () => {
    expect(ids(audit('--since', '1h').stdout)).toEqual(['r3', 'r4', 'r5', 'r6', 'r7', 'r8'])
    expect(ids(audit('--since', '1h', '--until', '15m').stdout)).toEqual(['r3', 'r4', 'r5', 'r6'])
    expect(ids(audit('--since', ago(90), '--until', ago(40)).stdout)).toEqual(['r2', 'r3']) // since inclusive, until exclusive
    expect(ids(audit('--since', ago(90).replace('Z', '+00:00')).stdout)[0]).toBe('r2')
  })

  test('--limit keeps the newest N matches, printed oldest first, and says on stderr that more match', () => {
    const r = audit('--limit', '2')
    expect(ids(r.stdout)).toEqual(['r7', 'r8'])
    expect(r.stderr).toMatch(/showing the newest 2 matching entries; more match/)
    const exact = audit('--identity', 'alice', '--limit', '3')
    expect(ids(exact.stdout)).toEqual(['r1', 'r3', 'r7'])
    expect(exact.stderr).toBe('')
  })

  test('no match is not an error: exit 0, nothing on stdout', () => {
    expect(audit('--identity', 'nobody')).toEqual({ code: 0, stdout: '', stderr: '' })
  })

  test('only where the trail is is read from the config: an unset secret variable of another block does not matter', () => {
    const jwt = join(dir, 'jwt.yaml')
    writeFileSync(
      jwt,
      `upstream: http://127.0.0.1:3001\nauth: { mode: jwt, jwt: { secret: "\${WARDLINE_AUDIT_TEST_UNSET}" } }\naudit: { output: ${JSON.stringify(trail)} }\n`,
    )
    expect(runCli(['check-config', '--config', jwt]).code).toBe(1) // the whole file does need it
    const r = runCli(['audit', '--config', jwt, '--identity', 'bob'])
    expect(r.code).toBe(0)
    expect(ids(r.stdout)).toEqual(['r2'])
  })

  test('--file reads a rotated file, gzipped too, without reading the config', () => {
    const rotated = join(dir, 'audit.jsonl.1.gz')
    writeFileSync(rotated, gzipSync(toJsonLines(ENTRIES.slice(0, 2))))
    const r = runCli(['audit', '--file', rotated, '--config', join(dir, 'no-such.yaml')])
    expect(r.code).toBe(0)
    expect(ids(r.stdout)).toEqual(['r1', 'r2'])
  })
})

describe('summary', () => {
  test('counts by identity, tenant and tool × decision, largest first', () => {
    const r = audit('--summary', '--by', 'identity', '--format', 'jsonl')
    expect(r.code).toBe(0)
    const rows = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(rows[0]).toEqual({ identity: 'alice', allow: 1, deny: 1, throttled: 1, passthrough: 0, error: 0, unauthorized: 0, total: 3 })
    expect(rows).toHaveLength(6)
  })

  test('with --decision, only those decisions are columns; csv and table forms', () => {
    const csv = audit('--summary', '--by', 'identity,tool', '--decision', 'throttled', '--format', 'csv')
    expect(csv.stdout).toBe('identity,tool,throttled,total\r\nalice,search,1,1\r\nbob,search,1,1\r\n')
    const table = audit('--summary', '--by', 'tenant', '--format', 'table')
    expect(table.stdout.split('\n')[0]).toMatch(/^TENANT\s+ALLOW\s+DENY\s+THROTTLED\s+PASSTHROUGH\s+ERROR\s+UNAUTHORIZED\s+TOTAL$/)
    expect(table.stdout.split('\n')[1]).toMatch(/^acme\s+4\s+1\s+1\s+0\s+0\s+0\s+6$/)
  })

  test('over a file, groups past the bound are counted together as *other*, so memory stays bounded', async () => {
    const skipped = { malformed: 0, tooLong: 0 }
    const r = await jsonlSummary(trail, buildFilter({}, now), ['identity'], 0, skipped, 2)
    expect(r.folded).toBe(true)
    expect(r.rows.map((row) => [row.group[0], row.total])).toEqual([
      ['*other*', 4],
      ['alice', 3],
      ['bob', 1],
    ])
  })

  test('--limit on a summary keeps the largest groups and says how many there are', () => {
    const r = audit('--summary', '--by', 'identity', '--limit', '1')
    expect(r.stdout.trim().split('\n')).toHaveLength(1)
    expect(r.stderr).toMatch(/showing the 1 largest of 6 groups/)
  })
})

describe('formats', () => {
  test('without --format: a table on a terminal, JSONL otherwise', () => {
    expect(defaultFormat(true)).toBe('table')
    expect(defaultFormat(false)).toBe('jsonl')
    expect(defaultFormat(undefined)).toBe('jsonl')
  })

  test('table: aligned columns, a header, reasons cut to their column', () => {
    const long = join(dir, 'long.jsonl')
    writeFileSync(long, toJsonLines([auditEntry('x1', { timestamp: ago(1), reason: 'r'.repeat(500) }), ...ENTRIES.slice(0, 2)]))
    const lines = runCli(['audit', '--file', long, '--format', 'table']).stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^TIME\s+IDENTITY\s+TENANT\s+METHOD\s+TOOL\s+DECISION\s+STATUS\s+MS\s+REASON$/)
    const at = (line: string, word: string): number => line.indexOf(word)
    // Timestamp order, oldest first (as from the table): the long-reason entry, written first but the newest, is last.
    expect(lines[3]).toMatch(/ r{79}…$/)
    expect(at(lines[3], 'acme')).toBe(at(lines[0], 'TENANT'))
    expect(at(lines[2], 'globex')).toBe(at(lines[0], 'TENANT'))
    expect(at(lines[2], 'throttled')).toBe(at(lines[0], 'DECISION'))
  })

  test('csv: RFC 4180 quoting, CRLF, and formula-looking cells defused', () => {
    const odd = join(dir, 'odd.jsonl')
    writeFileSync(
      odd,
      toJsonLines([auditEntry('c1', { timestamp: ago(1), identity: '=HYPERLINK("http://x")', tool: 'a,b', reason: 'say "hi"\nbye' })]),
    )
    const r = runCli(['audit', '--file', odd, '--format', 'csv'])
    expect(r.stdout).toBe(
      'timestamp,request_id,identity,tenant,method,tool,decision,status,latency_ms,reason,session_id,reason_code,server\r\n' +
        `${ago(1)},c1,"'=HYPERLINK(""http://x"")",acme,tools/call,"a,b",allow,200,1.5,"say ""hi""\nbye",,,\r\n`,
    )
    expect(['+1', '-1', '@a', '\tx'].map(csvField)).toEqual(["'+1", "'-1", "'@a", "'\tx"])
    expect(csvField(-1)).toBe('-1') // numbers are data, not formulas
  })

  test('a table never writes terminal control sequences a value carries', () => {
    expect(terminalSafe('ok\u001b]0;pwned\u0007\u202eevil')).toBe('ok\\x1b]0;pwned\\x07\\u202eevil')
    const hostile = join(dir, 'hostile.jsonl')
    writeFileSync(hostile, toJsonLines([auditEntry('h1', { timestamp: ago(1), reason: 'x\u001b[2Jy' })]))
    const r = runCli(['audit', '--file', hostile, '--format', 'table'])
    expect(r.stdout).not.toContain('\u001b')
    expect(r.stdout).toContain('x\\x1b[2Jy')
  })
})

describe('lookalike identities in the table', () => {
  // Each reads as `alice` when its invisible characters reach the terminal raw: tag characters,
  // variation selectors, the combining grapheme joiner, the Hangul fillers, a bidi mark, a soft hyphen.
  const LOOKALIKES = [
    'alice\u{e0041}\u{e007f}',
    'alice\ufe0f',
    'alice\u{e0100}',
    'alice\u034f',
    'alice\u3164',
    '\u115falice\u1160',
    'alice\uffa0',
    'ali\u200ece',
    'al\u00adice',
    'alice\u180f',
  ]
  const ESCAPED = [
    'alice\\u{e0041}\\u{e007f}',
    'alice\\ufe0f',
    'alice\\u{e0100}',
    'alice\\u034f',
    'alice\\u3164',
    '\\u115falice\\u1160',
    'alice\\uffa0',
    'ali\\u200ece',
    'al\\xadice',
    'alice\\u180f',
  ]
  const lookalikes = join(dir, 'lookalikes.jsonl')
  writeFileSync(
    lookalikes,
    toJsonLines([
      auditEntry('real', { timestamp: ago(2), identity: 'alice' }),
      ...LOOKALIKES.map((identity, i) => auditEntry(`l${i}`, { timestamp: ago(1), identity, tool: `search${LOOKALIKES[i].slice(5)}` })),
    ]),
  )
  const INVISIBLE = /[\p{Cc}\u2028\u2029\p{Default_Ignorable_Code_Point}]/u

  test('entries: only the real alice reads as alice; every other identity and tool shows its escapes', () => {
    const r = runCli(['audit', '--file', lookalikes, '--format', 'table'])
    expect(r).toMatchObject({ code: 0, stderr: '' })
    const rows = r.stdout.trimEnd().split('\n').slice(1)
    for (const row of rows) expect(row).not.toMatch(INVISIBLE)
    expect(rows.map((row) => row.split(/\s{2,}/)[1])).toEqual(['alice', ...ESCAPED])
  })

  test('the summary groups them apart and shows each escaped', () => {
    const r = runCli(['audit', '--file', lookalikes, '--summary', '--by', 'identity', '--format', 'table'])
    expect(r).toMatchObject({ code: 0, stderr: '' })
    const rows = r.stdout.trimEnd().split('\n').slice(1)
    for (const row of rows) expect(row).not.toMatch(INVISIBLE)
    expect(rows.map((row) => row.split(/\s+/)[0]).sort()).toEqual(['alice', ...ESCAPED].sort())
  })
})

describe('bad input: exit 1 and one precise line', () => {
  test.each([
    [['--decision', 'allowed'], /--decision allowed: "allowed" is not a decision \(one or more of allow, deny, throttled/],
    [
      ['--since', '5x'],
      /--since 5x: must be a duration back from now \(90s, 30m, 1h, 7d\), today or yesterday \(from 00:00 UTC\), or an ISO 8601 time/,
    ],
    [['--since', 'tomorrow'], /--since tomorrow: must be a duration back from now .* today or yesterday/],
    [['--since', 'today', '--until', 'today'], /--until today must be later than --since today/],
    [['--since', '2026-02-31'], /--since 2026-02-31: must be a duration/],
    [['--since', '2026-12-01T10:00'], /--since 2026-12-01T10:00: add Z or an offset/],
    [['--since', new Date(now + 86_400_000).toISOString()], /is in the future \(now is /],
    [['--since', '1h', '--until', '2h'], /--until 2h must be later than --since 1h/],
    [['--limit', '-1'], /--limit -1: must be a whole number from 1 to 100000, or 0/],
    [['--limit', '1e3'], /--limit 1e3: must be a whole number/],
    [['--format', 'xml'], /--format xml: must be one of table, jsonl, csv/],
    [['--by', 'method'], /--by method: "method" is not a column to group by/],
  ])('%j', (args, message) => {
    const r = audit(...args)
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(message)
    expect(r.stderr.trim().split('\n')).toHaveLength(1)
  })

  test('a config whose trail goes to stdout is refused with what to do instead', () => {
    const toStdout = join(dir, 'stdout.yaml')
    writeFileSync(toStdout, 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\naudit: { output: stdout }\n')
    const r = runCli(['audit', '--config', toStdout])
    expect(r.code).toBe(1)
    expect(r.stderr).toMatch(/audit\.output is stdout, so the trail went wherever the gateway's stdout goes.*pass --file/)
  })

  test('a missing file, a directory, a broken config', () => {
    const gone = runCli(['audit', '--file', join(dir, 'gone.jsonl')])
    expect(gone.code).toBe(1)
    expect(gone.stderr).toMatch(/gone\.jsonl: no such file/)
    const directory = runCli(['audit', '--file', dir])
    expect(directory.code).toBe(1)
    expect(directory.stderr).toMatch(/is a directory, not a JSONL audit file/)
    const broken = join(dir, 'broken.yaml')
    writeFileSync(broken, 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\naudit: { output: x.jsonl, retention_days: 0 }\n')
    const r = runCli(['audit', '--config', broken])
    expect(r.code).toBe(1)
    expect(r.stderr).toMatch(/audit\.retention_days/)
  })
})

describe('attacks', () => {
  test('malformed lines and a 20 MiB line are skipped and counted; the entries around them still count', () => {
    const messy = join(dir, 'messy.jsonl')
    writeFileSync(messy, toJsonLines([auditEntry('m1', { timestamp: ago(3) })]))
    appendFileSync(messy, '{"not": "an entry"}\nnot json at all\n\n')
    appendFileSync(messy, `{"timestamp":"${ago(2)}","reason":"${'z'.repeat(20 * 1024 * 1024)}"}\n`)
    appendFileSync(messy, toJsonLines([auditEntry('m2', { timestamp: ago(1), decision: 'nonsense' as never })]))
    appendFileSync(messy, toJsonLines([auditEntry('m3', { timestamp: ago(1) })]).trimEnd()) // no final newline
    const r = runCli(['audit', '--file', messy, '--limit', '0'])
    expect(r.code).toBe(0)
    expect(ids(r.stdout)).toEqual(['m1', 'm3'])
    expect(r.stderr).toBe(`wardline audit: ${messy}: skipped 3 lines that are not audit entries and 1 line over 16 MiB\n`)
  })

  test('a reader that goes away (| head -n 1) ends the command quietly with status 0', async () => {
    const many = join(dir, 'many.jsonl')
    const entries = Array.from({ length: 50_000 }, (_, i) => auditEntry(`p${i}`, { timestamp: ago(1) }))
    writeFileSync(many, toJsonLines(entries))
    const child = spawn(process.execPath, [cliMain(), 'audit', '--file', many, '--limit', '0'], { cwd: ROOT })
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
    child.stdout.once('data', () => child.stdout.destroy())
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve))
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' })
  })

  test('parsing is strict about what it turns into a time', () => {
    expect(parseTime('--since', '2026-12-01', 0)).toBe(Date.parse('2026-12-01T00:00:00Z'))
    expect(parseTime('--since', '90s', 100_000)).toBe(10_000)
    const morning = Date.parse('2026-12-02T09:30:00.250Z')
    expect(parseTime('--since', 'today', morning)).toBe(Date.parse('2026-12-02T00:00:00Z'))
    expect(parseTime('--since', ' TODAY ', morning)).toBe(Date.parse('2026-12-02T00:00:00Z'))
    expect(parseTime('--until', 'yesterday', morning)).toBe(Date.parse('2026-12-01T00:00:00Z'))
    // At 00:00 UTC exactly, today starts now; a leap day and a year's turn are ordinary days.
    expect(parseTime('--since', 'today', Date.parse('2026-12-02T00:00:00Z'))).toBe(Date.parse('2026-12-02T00:00:00Z'))
    expect(parseTime('--since', 'yesterday', Date.parse('2028-03-01T00:00:01Z'))).toBe(Date.parse('2028-02-29T00:00:00Z'))
    expect(parseTime('--since', 'yesterday', Date.parse('2027-01-01T23:59:59Z'))).toBe(Date.parse('2026-12-31T00:00:00Z'))
    // Only the two words: not a prototype property, not another day.
    for (const word of ['constructor', 'toString', '__proto__', 'tomorrow', 'today1'])
      expect(() => parseTime('--since', word, morning)).toThrow(/today or yesterday/)
    expect(() => parseTime('--since', '0s', now)).toThrow(/between 1s and 36500d/)
    expect(() => buildFilter({ since: '2026-13-01' }, now)).toThrow(/ISO 8601/)
  })
})
