/** Application logs: JSON or one human line per event, on the stream the logger was given (stderr in production). */
import { PassThrough } from 'node:stream'
import winston from 'winston'
import type { LogFormat } from '../src/config/types'
import { WardlineError } from '../src/errors'
import { escapeControls } from '../src/escape'
import { type LoggerOptions, createLogger, formatTextLine, redactText, resolveLogFormat, writeLogRecord } from '../src/log'

/** A logger writing to a captured stream; `lines()` gives what it wrote so far, one entry per line. */
function captured(options: LoggerOptions = {}, level: 'info' | 'debug' = 'info') {
  const stream = new PassThrough()
  let text = ''
  stream.on('data', (c: Buffer) => (text += c.toString('utf8')))
  const log = createLogger(level, { env: {}, ...options, stream })
  return {
    log,
    text: () => text,
    lines: () => text.split('\n').slice(0, -1),
  }
}

const TEXT_LINE = /^(\S+) (ERROR|WARN |INFO |DEBUG) (.*)$/

describe('choosing the format', () => {
  test('auto is text on a terminal and JSON everywhere else; json and text are taken as they are', () => {
    const cases: Array<[LogFormat, boolean, 'json' | 'text']> = [
      ['auto', true, 'text'],
      ['auto', false, 'json'],
      ['json', true, 'json'],
      ['json', false, 'json'],
      ['text', true, 'text'],
      ['text', false, 'text'],
    ]
    for (const [format, tty, expected] of cases) {
      expect(resolveLogFormat(format, tty)).toBe(expected)
      const out = captured({ format, tty, env: { NO_COLOR: '1' } })
      out.log.info('wardline listening', { listen: '127.0.0.1:8080' })
      const [line] = out.lines()
      if (expected === 'json')
        expect(JSON.parse(line)).toMatchObject({ level: 'info', message: 'wardline listening', listen: '127.0.0.1:8080' })
      else expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO {2}wardline listening listen=127\.0\.0\.1:8080$/)
    }
  })

  test("the JSON line is exactly winston's json line of before: sorted keys, timestamp, nothing added", () => {
    const before = new PassThrough()
    let expected = ''
    before.on('data', (c: Buffer) => (expected += c.toString('utf8')))
    const plain = winston.createLogger({
      format: winston.format.combine(winston.format.timestamp({ format: () => 'T' }), winston.format.json()),
      transports: [new winston.transports.Stream({ stream: before })],
    })
    const out = captured({ format: 'json' })
    const meta = { upstream: 'http://127.0.0.1:3001', nested: { b: 1, a: [1, 'x'] }, count: 3 }
    plain.warn('audit write failed', meta)
    out.log.warn('audit write failed', meta)
    expect(out.text().replace(/"timestamp":"[^"]+"/, '"timestamp":"T"')).toBe(expected)
  })

  test('writeLogRecord, the last words before exit, writes the same line shape as a logger', () => {
    for (const format of ['json', 'text'] as const) {
      const direct = new PassThrough()
      let text = ''
      direct.on('data', (c: Buffer) => (text += c.toString('utf8')))
      writeLogRecord(
        { level: 'error', message: 'cannot start', code: 'WL_LISTEN_FAILED', config: 'w.yaml' },
        { format, stream: direct, env: {} },
      )
      const out = captured({ format })
      out.log.error('cannot start', { code: 'WL_LISTEN_FAILED', config: 'w.yaml' })
      const strip = (s: string) => s.replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/, 'T')
      expect(strip(text)).toBe(strip(out.text()))
    }
  })
})

describe('the text line', () => {
  test('time (UTC), level, message, then key=value; values quoted only when they must be', () => {
    const line = formatTextLine({
      timestamp: '2026-12-01T22:56:50.123Z',
      level: 'warn',
      message: 'upstream unreachable',
      tool: 'search',
      count: 3,
      ok: false,
      none: null,
      reason: 'connect ECONNREFUSED 127.0.0.1:9',
      quoted: 'say "hi"',
      eq: 'a=b',
      empty: '',
      keys: ['listen', 'budget.limits[0]', 'two words'],
      path: 'budget.limits[0]',
      nested: { a: 1, b: ['x'] },
    })
    expect(line).toBe(
      '2026-12-01T22:56:50.123Z WARN  upstream unreachable tool=search count=3 ok=false none=null ' +
        'reason="connect ECONNREFUSED 127.0.0.1:9" quoted="say \\"hi\\"" eq="a=b" empty="" ' +
        'keys=[listen, "budget.limits[0]", "two words"] path=budget.limits[0] nested={"a":1,"b":["x"]}',
    )
  })

  test('an error value is described with its cause on one line', () => {
    const err = new WardlineError('WL_POSTGRES_UNAVAILABLE', 'postgres not ready', {
      cause: new Error('connect ECONNREFUSED\n127.0.0.1:1'),
    })
    expect(formatTextLine({ timestamp: 'T', level: 'error', message: 'x', error: err })).toBe(
      'T ERROR x error="postgres not ready (WL_POSTGRES_UNAVAILABLE): connect ECONNREFUSED 127.0.0.1:1"',
    )
  })

  test('color on a terminal: the level is colored, values never are; NO_COLOR or a pipe turns it off', () => {
    const colored = captured({ format: 'auto', tty: true, env: {} })
    colored.log.error('shutdown failed', { error: 'boom' })
    expect(colored.text()).toContain('\x1b[31mERROR\x1b[39m')
    expect(colored.text()).toContain('=\x1b[22mboom')
    for (const options of [
      { format: 'auto', tty: true, env: { NO_COLOR: '1' } },
      { format: 'text', tty: false, env: {} },
    ] as const) {
      const plain = captured(options)
      plain.log.error('shutdown failed', { error: 'boom' })
      expect(plain.text()).not.toContain('\x1b')
      expect(plain.lines()[0]).toMatch(/ ERROR shutdown failed error=boom$/)
    }
    // NO_COLOR set but empty means "not set" (no-color.org).
    const empty = captured({ format: 'auto', tty: true, env: { NO_COLOR: '' } })
    empty.log.info('x')
    expect(empty.text()).toContain('\x1b[')
  })
})

describe('attacks on the text line', () => {
  const forged = 'search\n2026-12-01T00:00:00.000Z ERROR forged line\x1b[31m red \x9b31m \u2028 \u202egnp.exe'

  test('a caller-chosen value holding newlines or ANSI escapes cannot forge a second line or color the terminal', () => {
    for (const tty of [false, true]) {
      const out = captured({ format: 'text', tty, env: {} })
      out.log.warn('tool call refused', { tool: forged, [`k\nINFO x=`]: 'v' })
      out.log.warn(`message ${forged}`)
      const text = out.text()
      expect(text.split('\n')).toHaveLength(3) // two records, two newlines
      // eslint-disable-next-line no-control-regex -- control characters are what this matches
      for (const line of out.lines()) expect(line.replace(/\x1b\[[0-9;]*m/g, '')).toMatch(TEXT_LINE)
      // Only the escapes the formatter adds itself (dim, level color) and only on a terminal.
      // eslint-disable-next-line no-control-regex -- control characters are what this matches
      const escapes = text.match(/\x1b\[[0-9;]*m/g) ?? []
      expect(escapes.every((e) => ['\x1b[2m', '\x1b[22m', '\x1b[33m', '\x1b[39m'].includes(e))).toBe(true)
      if (!tty) expect(escapes).toEqual([])
      // eslint-disable-next-line no-control-regex -- control characters are what this matches
      expect(text.replace(/\x1b\[(2|22|33|39)m/g, '')).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202e]/)
      // eslint-disable-next-line no-control-regex -- control characters are what this matches
      const plain = text.replace(/\x1b\[(2|22|33|39)m/g, '')
      expect(plain).toContain('tool="search\\n2026-12-01T00:00:00.000Z ERROR forged line\\x1b[31m red \\x9b31m \\u2028 \\u202egnp.exe"')
      expect(plain).toContain('"k\\nINFO x="=v')
    }
  })

  test('a nested value is JSON with its control characters escaped too (JSON.stringify leaves DEL, C1 and U+2028 raw)', () => {
    const line = formatTextLine({ timestamp: 'T', level: 'info', message: 'm', args: { q: 'a\x7f\x9b\u2028b\n' } })
    expect(line).toBe('T INFO  m args={"q":"a\\x7f\\x9b\\u2028b\\n"}')
    expect(escapeControls('tab\there')).toBe('tab\\there')
  })

  test('a JSON line keeps control characters escaped by JSON itself: one record per line', () => {
    const out = captured({ format: 'json' })
    out.log.warn('tool call refused', { tool: forged })
    expect(out.lines()).toHaveLength(1)
    expect(JSON.parse(out.lines()[0])).toMatchObject({ tool: forged })
  })
})

describe('secrets never reach the log', () => {
  const secret = 'k3y-"with"\\quotes-and-length'

  test('a configured secret is masked wherever it appears, in JSON (escaped) and in text', () => {
    for (const format of ['json', 'text'] as const) {
      const out = captured({ format, secrets: [secret, 'short'] })
      out.log.error(`jwks fetch failed for ${secret}`, { detail: `token ${secret} rejected`, nested: { s: secret } })
      out.log.info('a short secret is not masked by value: short')
      const text = out.text()
      expect(text).not.toContain(secret)
      expect(text).not.toContain(JSON.stringify(secret).slice(1, -1))
      expect(text).not.toContain('with')
      expect(text).toContain('***')
      expect(text).toContain('value: short')
    }
  })

  test('a URL password is masked whatever its length, even for a logger that was told no secrets', () => {
    for (const format of ['json', 'text'] as const) {
      const out = captured({ format })
      out.log.error('postgres failed', { error: 'could not connect to postgres://wardline:pw@db.internal:5432/wardline' })
      expect(out.text()).toContain('postgres://wardline:***@db.internal:5432/wardline')
      expect(out.text()).not.toContain(':pw@')
    }
    expect(redactText('see https://alice:s3cret@idp.example/jwks and http://host/x?a=b', [])).toBe(
      'see https://alice:***@idp.example/jwks and http://host/x?a=b',
    )
  })

  test('writeLogRecord masks the secrets it is given too', () => {
    const stream = new PassThrough()
    let text = ''
    stream.on('data', (c: Buffer) => (text += c.toString('utf8')))
    writeLogRecord({ level: 'error', message: `cannot start: ${secret}` }, { format: 'json', stream, secrets: [secret] })
    expect(JSON.parse(text)).toMatchObject({ message: 'cannot start: ***' })
  })
})
