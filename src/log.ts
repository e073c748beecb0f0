import type { Writable } from 'node:stream'
import winston from 'winston'
import { describeError } from './errors'
import { UNSAFE_CHARACTERS, escapeControls } from './escape'

/**
 * The levels and formats the logger knows. The config offers the same values (`log_level`, `log_format`);
 * they are spelt here so the logger imports nothing from config/, which itself logs.
 */
export type LogLevel = 'error' | 'warn' | 'info' | 'debug'

/** `auto`: a human line per event when stderr is a terminal, else one JSON object per line. */
export type LogFormat = 'auto' | 'json' | 'text'

export type Logger = winston.Logger

/** Where winston keeps the finished line (triple-beam's MESSAGE, a registered symbol). */
const MESSAGE = Symbol.for('message')

export interface LoggerOptions {
  /** `auto` (the default): text when stderr is a terminal, JSON otherwise. */
  readonly format?: LogFormat
  /** Whether stderr is a terminal; by default process.stderr.isTTY. Tests pass it. */
  readonly tty?: boolean
  /** Read for NO_COLOR; by default process.env. */
  readonly env?: NodeJS.ProcessEnv
  /** Where lines go instead of stderr (tests). */
  readonly stream?: Writable
  /** Values never written as they are (the config's secrets): each occurrence becomes `***`. */
  readonly secrets?: readonly string[]
}

/**
 * Application logs on stderr: one JSON object per line (log shippers and tests read it, so its shape
 * never changes), or, for a person at a terminal, one human line per event. stdout is reserved for the
 * audit trail (audit.output: stdout), so nothing here may ever write there.
 */
export function createLogger(level: LogLevel = 'info', options: LoggerOptions = {}): Logger {
  const tty = options.tty ?? process.stderr.isTTY === true
  const secrets = new Set<string>()
  const logger = winston.createLogger({
    level,
    format:
      resolveLogFormat(options.format ?? 'auto', tty) === 'text'
        ? winston.format.combine(winston.format.timestamp(), textFormat(useColor(tty, options.env ?? process.env), secrets))
        : winston.format.combine(winston.format.timestamp(), winston.format.json(), redactFormat(secrets)),
    transports: [
      options.stream !== undefined
        ? new winston.transports.Stream({ stream: options.stream })
        : new winston.transports.Console({ stderrLevels: ['error', 'warn', 'info', 'http', 'verbose', 'debug', 'silly'] }),
    ],
  })
  SECRETS.set(logger, secrets)
  addLogSecrets(logger, options.secrets ?? [])
  return logger
}

/** A logger that drops everything, for tests and tools that must stay quiet. */
export function silentLogger(): Logger {
  return winston.createLogger({ silent: true, transports: [new winston.transports.Console({ silent: true })] })
}

/** `auto` is text only for a person: when stderr is a terminal. A pipe, a file or a container log gets JSON. */
export function resolveLogFormat(format: LogFormat, tty: boolean): 'json' | 'text' {
  return format === 'auto' ? (tty ? 'text' : 'json') : format
}

/** Color only on a terminal, and never when NO_COLOR is set to anything but the empty string (no-color.org). */
export function useColor(tty: boolean, env: NodeJS.ProcessEnv): boolean {
  return tty && (env.NO_COLOR === undefined || env.NO_COLOR === '')
}

/**
 * Secrets shorter than this are not masked by value: masking a 3-letter password everywhere would
 * garble every line that happens to contain those letters. A password inside a URL (`postgres://u:pw@`)
 * is masked by its place whatever its length.
 */
const MIN_MASKED_SECRET_LENGTH = 8
const SECRETS = new WeakMap<Logger, Set<string>>()

/** Adds values the logger must never write (a reload may bring a new secret). */
export function addLogSecrets(log: Logger, values: readonly string[]): void {
  const set = SECRETS.get(log)
  if (set === undefined) return
  for (const value of values) if (value.length >= MIN_MASKED_SECRET_LENGTH) set.add(value)
}

/**
 * `scheme://user:password@`: the password part, whatever the scheme (a DSN in a driver's error message).
 * Up to the last `@` before the host, as URL parsers read it: `u:p@ss@db` has the password `p@ss`.
 */
const URL_PASSWORD = /([a-z][a-z0-9+.-]*:\/\/[^\s:/@"'?#]*:)[^\s/"'?#]+@/gi

/** A query parameter (`?code=`, `&api_key=`, `&X-Amz-Signature=`) and its value, up to the next `&`, `#`, quote or space. */
const QUERY_PARAMETER = /([?&])([\w.~-]+)=([^&#\s"'\\]*)/g
/** The last word of a parameter name (apiKey, client_secret, X-Amz-Signature) that says its value is a credential. */
const SECRET_PARAMETER_WORDS = new Set('secret token password passwd pwd key sig signature code auth credential credentials'.split(' '))

/**
 * The password of any URL in a text, and the values of its credential-named query parameters (a
 * jwks_url with `?code=`, an Azure SAS `&sig=`), as `***`: by their place, whatever their length.
 */
export function maskUrlSecrets(text: string): string {
  if (!text.includes('://')) return text
  return text.replace(URL_PASSWORD, '$1***@').replace(QUERY_PARAMETER, (all, sep: string, name: string, value: string) => {
    const words = name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase()
    const last = words.slice(Math.max(words.lastIndexOf('_'), words.lastIndexOf('.'), words.lastIndexOf('-'), words.lastIndexOf('~')) + 1)
    return value !== '' && SECRET_PARAMETER_WORDS.has(last) ? `${sep}${name}=***` : all
  })
}

/** Replaces every secret in a text, and the credentials of any URL in it, by `***`. */
export function redactText(text: string, secrets: Iterable<string>): string {
  let out = text
  for (const secret of secrets) {
    if (out.includes(secret)) out = out.split(secret).join('***')
    // Inside a JSON line a secret with a quote or a backslash is written escaped.
    const escaped = JSON.stringify(secret).slice(1, -1)
    if (escaped !== secret && out.includes(escaped)) out = out.split(escaped).join('***')
  }
  return maskUrlSecrets(out)
}

/** The finished JSON line, with secrets masked after serialization (so the object logged is never changed). */
function redactFormat(secrets: Set<string>): winston.Logform.Format {
  return winston.format((info) => {
    const line = info as unknown as Record<symbol, string>
    line[MESSAGE] = redactText(line[MESSAGE], secrets)
    return info
  })()
}

/** The fields every record has; the text line shows them in front, not as key=value. */
const FRAME = new Set(['level', 'message', 'timestamp'])
const LEVEL_COLOR: Readonly<Record<string, string>> = { error: '31', warn: '33', info: '32', debug: '36' }
const dim = (text: string, color: boolean): string => (color ? `\x1b[2m${text}\x1b[22m` : text)

function textFormat(color: boolean, secrets: Set<string>): winston.Logform.Format {
  return winston.format((info) => {
    const line = info as unknown as Record<symbol, string>
    line[MESSAGE] = redactText(formatTextLine(info, color), secrets)
    return info
  })()
}

/**
 * One human line: `2026-12-01T22:56:50.123Z INFO  wardline listening listen=127.0.0.1:8080 auth=jwt`.
 * Time in UTC, as in the JSON lines and the audit trail, so a line and its audit entries match without
 * time-zone arithmetic. Every control character is escaped, in the message and in values: a tool name
 * holding a newline or an ANSI escape cannot forge a second line or recolor the terminal.
 */
export function formatTextLine(record: Record<string, unknown>, color = false): string {
  const level = typeof record.level === 'string' ? record.level : 'info'
  const tag = level.toUpperCase().padEnd(5)
  const time = typeof record.timestamp === 'string' ? escapeControls(record.timestamp) : new Date().toISOString()
  const code = LEVEL_COLOR[level]
  const parts = [
    dim(time, color),
    color && code !== undefined ? `\x1b[${code}m${tag}\x1b[39m` : tag,
    // eslint-disable-next-line @typescript-eslint/no-base-to-string -- winston passes whatever was logged as the message
    escapeControls(typeof record.message === 'string' ? record.message : String(record.message ?? '')),
  ]
  for (const key of Object.keys(record)) {
    if (FRAME.has(key)) continue
    parts.push(`${dim(`${formatKey(key)}=`, color)}${formatValue(record[key])}`)
  }
  return parts.join(' ')
}

/** A value as it reads best: bare when it can be, quoted and escaped when it has spaces, quotes or `=`. */
export function formatValue(value: unknown, inList = false): string {
  // Brackets are fine in a bare value (budget.limits[0]) but not in a list, where `]` would end it.
  if (typeof value === 'string') return BARE.test(value) && !(inList && /[[\]]/.test(value)) ? value : quote(value)
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value)
  }
  if (Array.isArray(value)) return `[${value.map((item) => formatValue(item, true)).join(', ')}]`
  if (value instanceof Error) return quote(describeError(value))
  let json: string | undefined
  try {
    json = JSON.stringify(value)
  } catch {
    json = undefined // a cycle: say so rather than fail the log call
  }
  return json === undefined ? '[unserializable]' : escapeControls(json)
}

/** A value written without quotes: no space, quote, `=`, comma, brace, backslash or unsafe character (escape.ts). */
const BARE = new RegExp(`^[^\\s"'=,{}\\\\${UNSAFE_CHARACTERS}]+$`, 'u')

function formatKey(key: string): string {
  return /^[\w.\-[\]]+$/.test(key) ? key : quote(key)
}

function quote(text: string): string {
  return `"${escapeControls(text.replace(/[\\"]/g, (c) => `\\${c}`))}"`
}

/**
 * Logs at most one line per `intervalMs` per key and counts what it held back, so an outage that
 * fails every request produces a line a minute, not a line a request.
 */
export class RateLimitedLog {
  private readonly last = new Map<string, { at: number; suppressed: number }>()

  constructor(
    private readonly log: Logger,
    private readonly intervalMs = 60_000,
    private readonly now = Date.now,
  ) {}

  warn(key: string, message: string, meta: Record<string, unknown> = {}): void {
    const t = this.now()
    const seen = this.last.get(key)
    if (seen && t - seen.at < this.intervalMs) {
      seen.suppressed++
      return
    }
    const suppressed = seen?.suppressed ?? 0
    this.last.set(key, { at: t, suppressed: 0 })
    this.log.warn(message, suppressed > 0 ? { ...meta, suppressed_since_last: suppressed } : meta)
  }
}

/** One record for writeLogRecord: what a logger call would carry. */
export interface LogRecord {
  readonly level: LogLevel
  readonly message: string
  readonly [field: string]: unknown
}

/**
 * Writes one record to stderr at once (synchronously for files, pipes and terminals on Linux), in
 * the format a logger made with the same options writes: for the last words before process.exit,
 * which must not sit in a logger's stream when the process ends.
 */
export function writeLogRecord(record: LogRecord, options: LoggerOptions = {}): void {
  const tty = options.tty ?? process.stderr.isTTY === true
  const full: Record<string, unknown> = { ...record, timestamp: new Date().toISOString() }
  const line =
    resolveLogFormat(options.format ?? 'auto', tty) === 'text'
      ? formatTextLine(full, useColor(tty, options.env ?? process.env))
      : JSON.stringify(sortedKeys(full)) // winston's json format sorts keys: the same line shape as every other
  const secrets = (options.secrets ?? []).filter((s) => s.length >= MIN_MASKED_SECRET_LENGTH)
  const out = options.stream ?? process.stderr
  out.write(`${redactText(line, secrets)}\n`)
}

function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys)
  if (value === null || typeof value !== 'object' || value instanceof Error) return value
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortedKeys((value as Record<string, unknown>)[k])]),
  )
}
