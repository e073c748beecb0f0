import { DECISIONS, type Decision } from '../pipeline/exchange'
import { REASON_CODES, type ReasonCode, isReasonCode } from '../pipeline/reason'
import { Glob } from '../glob'
import type { AuditEntry } from './entry'

/**
 * What `wardline audit` selects, already validated. Globs are policy-rule globs (`*` is the only
 * wildcard); null means "no condition". The time range is [sinceMs, untilMs) on the entry's
 * `timestamp` (when the request arrived).
 */
export interface AuditFilter {
  readonly identity: Glob | null
  readonly tenant: Glob | null
  readonly tool: Glob | null
  /** Entries of requests routed to a server matching this glob (entries without a server never match). */
  readonly server: Glob | null
  /** null: every decision. */
  readonly decisions: readonly Decision[] | null
  /** null: any reason code, or none. Otherwise entries carrying one of these (an ordinary allow carries none). */
  readonly reasonCodes: readonly ReasonCode[] | null
  readonly sinceMs: number | null
  readonly untilMs: number | null
}

/** The columns a summary can group by. */
export const GROUP_COLUMNS = ['identity', 'tenant', 'tool'] as const
export type GroupColumn = (typeof GROUP_COLUMNS)[number]

/** Rows printed at most when --limit is not given; 0 means every matching row, streamed. */
export const DEFAULT_LIMIT = 100
/**
 * Largest --limit other than 0. The newest N rows are kept until the scan ends (JSONL: a ring buffer;
 * Postgres: the server's top-N sort), so N bounds memory; --limit 0 streams everything instead.
 */
export const MAX_LIMIT = 100_000

/** A problem with what the operator typed: printed as is, exit status 1. */
export class AuditQueryError extends Error {
  override readonly name = 'AuditQueryError'
}

const UNITS: Readonly<Record<string, number>> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }
const MAX_RELATIVE_MS = 36_500 * 86_400_000
/** A calendar date, or a date and time with seconds optional, fractions optional, and an offset required. */
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}(?::?\d{2})?))?$/i
const ISO_WITHOUT_OFFSET = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?$/i

/** The days a word names, back from today's: each starts at 00:00 UTC, like a date alone. */
const DAY_WORDS: Readonly<Record<string, number>> = { today: 0, yesterday: 1 }
const DAY_MS = 86_400_000

/**
 * `--since` / `--until`: a duration back from now (`90s`, `30m`, `1h`, `7d`), `today` or `yesterday`,
 * or an ISO 8601 time. A date alone is midnight UTC, and so are `today` and `yesterday` (the start of
 * that UTC day: `--since yesterday --until today` is all of yesterday, as the trail's UTC timestamps
 * show it); a date and time needs `Z` or an offset: the audit trail is in UTC, and a time read in
 * whatever zone this shell has would select another hour than the operator thinks, and another on
 * the next operator's machine.
 */
export function parseTime(flag: string, text: string, nowMs: number): number {
  const value = text.trim()
  const word = value.toLowerCase()
  // A UTC day is always 24 h long (no daylight saving), so whole days of epoch milliseconds are days.
  if (Object.hasOwn(DAY_WORDS, word)) return (Math.floor(nowMs / DAY_MS) - DAY_WORDS[word]) * DAY_MS
  const relative = /^(\d{1,9})([smhd])$/.exec(value)
  if (relative !== null) {
    const ms = Number(relative[1]) * UNITS[relative[2]]
    if (ms < 1000 || ms > MAX_RELATIVE_MS) throw new AuditQueryError(`${flag} ${text}: a duration must be between 1s and 36500d`)
    return nowMs - ms
  }
  if (ISO_WITHOUT_OFFSET.test(value)) {
    throw new AuditQueryError(`${flag} ${text}: add Z or an offset (${value}Z, ${value}+02:00): audit timestamps are UTC`)
  }
  const iso = ISO.exec(value)
  // An offset of hours alone (`+01`, as psql prints a timestamptz) is ISO 8601 too, but Date.parse wants minutes.
  const full = iso !== null && /^[+-]\d{2}$/.test(iso[7] ?? '') ? `${value}:00` : value
  const ms = iso === null ? NaN : Date.parse(iso[4] === undefined ? `${value}T00:00:00Z` : full.replace(' ', 'T'))
  // Date.parse rolls 2026-02-31 over to March: a date that does not round-trip is refused.
  if (iso === null || Number.isNaN(ms) || !sameCalendarDay(iso, ms)) {
    throw new AuditQueryError(
      `${flag} ${text}: must be a duration back from now (90s, 30m, 1h, 7d), today or yesterday (from 00:00 UTC), or an ISO 8601 time (2026-12-01T09:30:00Z)`,
    )
  }
  return ms
}

function sameCalendarDay(iso: RegExpExecArray, ms: number): boolean {
  const [, y, mo, d, h, mi, s] = iso
  if (Number(mo) < 1 || Number(mo) > 12 || Number(d) < 1 || Number(d) > 31) return false
  if (h !== undefined && (Number(h) > 23 || Number(mi) > 59 || (s !== undefined && Number(s) > 59))) return false
  // Checked in UTC on the date as written: an offset moves the instant, never the written date's validity.
  const probe = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)))
  return probe.getUTCDate() === Number(d) && Number.isFinite(ms)
}

/** `--decision deny` or `--decision deny,throttled`. */
export function parseDecisions(text: string): Decision[] {
  const out: Decision[] = []
  for (const part of text.split(',')) {
    const name = part.trim()
    if (!(DECISIONS as readonly string[]).includes(name)) {
      throw new AuditQueryError(
        `--decision ${text}: ${JSON.stringify(name)} is not a decision (one or more of ${DECISIONS.join(', ')}, comma-separated)`,
      )
    }
    if (!out.includes(name as Decision)) out.push(name as Decision)
  }
  return out
}

/** `--reason-code policy.denied` or `--reason-code budget.exceeded,budget.repeat`. */
export function parseReasonCodes(text: string): ReasonCode[] {
  const out: ReasonCode[] = []
  for (const part of text.split(',')) {
    const name = part.trim()
    if (!isReasonCode(name)) {
      throw new AuditQueryError(
        `--reason-code ${text}: ${JSON.stringify(name)} is not a reason code (one or more of ${REASON_CODES.join(', ')}, comma-separated)`,
      )
    }
    if (!out.includes(name)) out.push(name)
  }
  return out
}

/** `--limit N`: 1..MAX_LIMIT, or 0 for every matching row. */
export function parseLimit(text: string): number {
  const n = /^\d{1,7}$/.test(text.trim()) ? Number(text) : NaN
  if (!(n >= 0 && n <= MAX_LIMIT)) {
    throw new AuditQueryError(
      `--limit ${text}: must be a whole number from 1 to ${MAX_LIMIT}, or 0 for every matching row (streamed, oldest first)`,
    )
  }
  return n
}

/** `--by identity,tool`: the summary's grouping columns, in the order given. */
export function parseGroupColumns(text: string): GroupColumn[] {
  const out: GroupColumn[] = []
  for (const part of text.split(',')) {
    const name = part.trim()
    if (!(GROUP_COLUMNS as readonly string[]).includes(name)) {
      throw new AuditQueryError(
        `--by ${text}: ${JSON.stringify(name)} is not a column to group by (one or more of ${GROUP_COLUMNS.join(', ')})`,
      )
    }
    if (!out.includes(name as GroupColumn)) out.push(name as GroupColumn)
  }
  return out
}

export interface FilterOptions {
  readonly identity?: string
  readonly tenant?: string
  readonly tool?: string
  readonly server?: string
  readonly decision?: string
  readonly reasonCode?: string
  readonly since?: string
  readonly until?: string
}

/** The validated filter of the command line's options, every problem reported with its flag. */
export function buildFilter(options: FilterOptions, nowMs: number): AuditFilter {
  const glob = (text: string | undefined): Glob | null => {
    if (text === undefined) return null
    const g = new Glob(text)
    return g.any ? null : g
  }
  const sinceMs = options.since === undefined ? null : parseTime('--since', options.since, nowMs)
  const untilMs = options.until === undefined ? null : parseTime('--until', options.until, nowMs)
  if (sinceMs !== null && sinceMs > nowMs) {
    // Most likely a typo (a year off); an empty answer would look like "nothing happened".
    throw new AuditQueryError(`--since ${options.since}: is in the future (now is ${new Date(nowMs).toISOString()})`)
  }
  if (sinceMs !== null && untilMs !== null && untilMs <= sinceMs) {
    throw new AuditQueryError(
      `--until ${options.until} must be later than --since ${options.since} (${new Date(untilMs).toISOString()} is not after ${new Date(sinceMs).toISOString()})`,
    )
  }
  return {
    identity: glob(options.identity),
    tenant: glob(options.tenant),
    tool: glob(options.tool),
    // `*` too selects only entries that have a server: `--server '*'` asks for routed requests.
    server: options.server === undefined ? null : new Glob(options.server),
    decisions: options.decision === undefined ? null : parseDecisions(options.decision),
    reasonCodes: options.reasonCode === undefined ? null : parseReasonCodes(options.reasonCode),
    sinceMs,
    untilMs,
  }
}

/** The filter applied in JavaScript (the JSONL source; Postgres applies the same in SQL). */
export function matches(filter: AuditFilter, e: AuditEntry, timestampMs: number): boolean {
  if (filter.identity !== null && !filter.identity.matches(e.identity)) return false
  if (filter.tenant !== null && !filter.tenant.matches(e.tenant)) return false
  if (filter.tool !== null && !filter.tool.matches(e.tool)) return false
  if (filter.server !== null && (e.server === undefined || !filter.server.matches(e.server))) return false
  if (filter.decisions !== null && !filter.decisions.includes(e.decision)) return false
  if (filter.reasonCodes !== null && !(filter.reasonCodes as readonly unknown[]).includes(e.reason_code)) return false
  if (filter.sinceMs !== null && !(timestampMs >= filter.sinceMs)) return false
  if (filter.untilMs !== null && !(timestampMs < filter.untilMs)) return false
  return true
}

/** One summary row: the group's values (in the order of the grouping columns), counts by decision, total. */
export interface SummaryRow {
  readonly group: readonly string[]
  /** Indexed like DECISIONS. */
  readonly counts: readonly number[]
  readonly total: number
}

/** Summary rows by total, largest first; ties by group values, so the order is stable. */
export function compareSummaryRows(a: SummaryRow, b: SummaryRow): number {
  if (a.total !== b.total) return b.total - a.total
  for (let i = 0; i < a.group.length; i++) {
    if (a.group[i] !== b.group[i]) return compareCodePoints(a.group[i], b.group[i])
  }
  return 0
}

/**
 * Code point order, which is UTF-8 byte order: Postgres' COLLATE "C" (the summary's tie order there).
 * JavaScript's < compares UTF-16 units, which puts U+1F600 (a surrogate pair, D83D…) before U+FF01.
 */
export function compareCodePoints(a: string, b: string): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a.charCodeAt(i)
    const y = b.charCodeAt(i)
    if (x === y) continue
    // Equal prefixes: both are high surrogates, both low, or neither. A surrogate beside a non-surrogate stands for a larger code point.
    const sx = x >= 0xd800 && x <= 0xdfff
    const sy = y >= 0xd800 && y <= 0xdfff
    return sx === sy ? x - y : sx ? 1 : -1
  }
  return a.length - b.length
}

const ENTRY_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/

/** The AuditEntry a parsed JSONL line holds, or null when it is not one (wrong types, missing fields). */
export function asEntry(value: unknown): AuditEntry | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null
  const e = value as Record<string, unknown>
  const strings = ['timestamp', 'request_id', 'identity', 'tenant', 'method', 'tool', 'decision'] as const
  for (const key of strings) if (typeof e[key] !== 'string') return null
  // ISO 8601 with Z or an offset, as the gateway writes it: Date.parse reads "2026-12-01T09:30:00" or
  // "Dec 1 2026" in the shell's zone, which would move the entry by hours without a word.
  if (!ENTRY_TIMESTAMP.test(e.timestamp as string)) return null
  if (!(DECISIONS as readonly unknown[]).includes(e.decision)) return null
  if (typeof e.status !== 'number' || (typeof e.latency_ms !== 'number' && e.latency_ms !== null)) return null
  if (e.reason_code !== undefined && typeof e.reason_code !== 'string') return null
  if (e.reason !== undefined && typeof e.reason !== 'string') return null
  if (e.session_id !== undefined && typeof e.session_id !== 'string') return null
  if (e.server !== undefined && typeof e.server !== 'string') return null
  return value as AuditEntry
}
