import type { BucketLimit, BudgetConfig, RepeatLimit, ToolBudget } from './types'
import type { Node, Reader } from './reader'
import { join } from './reader'

const PAIR_KEYS = ['requests_per_window', 'window_seconds']
const LIMIT_KEYS = [...PAIR_KEYS, 'limits']

/** 31 days: "1,000 a day" and "20,000 a month" are budgets operators ask for; longer is a quota, not a rate. */
export const MAX_WINDOW_SECONDS = 31 * 86_400

/** Windows per bucket: a minute, an hour, a day and a month fit with room to spare. */
const MAX_WINDOWS = 8

const DEFAULT_LIMIT: BucketLimit = { requestsPerWindow: 100, windowSeconds: 60 }

export function readBudget(r: Reader, value: unknown): BudgetConfig {
  const o = r.object(value, 'budget', [...LIMIT_KEYS, 'tenants', 'tools', 'repeat_limit', 'check_timeout_seconds', 'on_store_error'])
  const top = readLimits(r, o, 'budget', [DEFAULT_LIMIT])
  return {
    configured: value !== undefined && value !== null,
    limits: top,
    tenants: readTenants(r, o.tenants, top),
    tools: readTools(r, o.tools, top),
    repeatLimit: readRepeatLimit(r, o.repeat_limit),
    // 5 s: long enough to ride out a pool wait under a burst, short enough that a hung database
    // degrades to "fail open" before an MCP client's own request timeout fires.
    checkTimeoutSeconds: r.number(o.check_timeout_seconds, 'budget.check_timeout_seconds', 5, 0, 60, true),
    // open stays the default: with the memory store (one process) nothing can fail, and an operator who
    // runs replicas on Postgres chooses between availability, enforcement and a local limit knowingly.
    onStoreError: r.oneOf(o.on_store_error, 'budget.on_store_error', ['open', 'closed', 'local'] as const, 'open'),
  }
}

/**
 * A bucket's windows: `limits:` (a list of pairs) or the single `requests_per_window` /
 * `window_seconds` pair, never both. A key of the pair left out takes the inherited value, which must
 * then be a single window too.
 */
function readLimits(r: Reader, o: Node, path: string, inherited: readonly BucketLimit[]): BucketLimit[] {
  const hasPair = o.requests_per_window !== undefined || o.window_seconds !== undefined
  if (o.limits !== undefined) {
    if (hasPair) r.note(path, 'set either limits or requests_per_window / window_seconds, not both')
    return readList(r, o.limits, join(path, 'limits'))
  }
  if (!hasPair) return [...inherited]
  if (inherited.length !== 1 && (o.requests_per_window === undefined || o.window_seconds === undefined)) {
    r.note(path, 'must set both requests_per_window and window_seconds (budget uses limits:, so there is no single value to take)')
    return [...inherited]
  }
  // inherited is empty only when the top-level limits failed to read (already noted): do not crash on it.
  return [readPair(r, o, path, inherited[0] ?? DEFAULT_LIMIT)]
}

function readList(r: Reader, value: unknown, path: string): BucketLimit[] {
  const items = r.list(value, path)
  // `limits:` left blank would otherwise read as no window at all: a bucket that never refuses.
  if (value === null || (Array.isArray(value) && items.length === 0)) r.note(path, 'must list at least one window')
  if (items.length > MAX_WINDOWS) r.note(path, `at most ${MAX_WINDOWS} windows`)
  const out: BucketLimit[] = []
  const lengths = new Set<number>()
  items.forEach((item, i) => {
    const itemPath = join(path, i)
    const o = r.object(item, itemPath, PAIR_KEYS)
    if ([o.requests_per_window, o.window_seconds].some((v) => v === undefined || v === null)) {
      r.note(itemPath, 'must set requests_per_window and window_seconds')
      return
    }
    const limit = readPair(r, o, itemPath, DEFAULT_LIMIT)
    // Each window is a bucket keyed by its length (budget/keys.ts): two of one length would be one bucket.
    if (lengths.has(limit.windowSeconds)) r.note(join(itemPath, 'window_seconds'), `${limit.windowSeconds} is listed twice`)
    lengths.add(limit.windowSeconds)
    out.push(limit)
  })
  return out
}

function readPair(r: Reader, o: Node, path: string, fallback: BucketLimit): BucketLimit {
  return {
    requestsPerWindow: r.int(o.requests_per_window, join(path, 'requests_per_window'), fallback.requestsPerWindow, 1, 1_000_000_000),
    // Fractions are allowed so tests and demos can use sub-second windows.
    windowSeconds: r.number(o.window_seconds, join(path, 'window_seconds'), fallback.windowSeconds, 0, MAX_WINDOW_SECONDS, true),
  }
}

function readTenants(r: Reader, value: unknown, top: readonly BucketLimit[]): Record<string, readonly BucketLimit[]> {
  const out = Object.create(null) as Record<string, readonly BucketLimit[]>
  for (const [name, child, path] of entries(r, value, 'budget.tenants')) {
    // One level only: an override holds limits, never further overrides.
    const o = r.object(child, path, LIMIT_KEYS)
    if (child === null || child === undefined) r.note(path, 'must set requests_per_window and window_seconds, or limits')
    out[name] = readLimits(r, o, path, top)
  }
  return out
}

/** A tool entry has a bucket of its own unless it sets only `cost`. */
function readTools(r: Reader, value: unknown, top: readonly BucketLimit[]): Record<string, ToolBudget> {
  const out = Object.create(null) as Record<string, ToolBudget>
  for (const [name, child, path] of entries(r, value, 'budget.tools')) {
    const o = r.object(child, path, [...LIMIT_KEYS, 'cost'])
    if (child === null || child === undefined) r.note(path, 'must set requests_per_window and window_seconds, limits, or cost')
    const costOnly = o.cost !== undefined && LIMIT_KEYS.every((k) => o[k] === undefined)
    out[name] = {
      limits: costOnly ? [] : readLimits(r, o, path, top),
      cost: r.int(o.cost, join(path, 'cost'), 1, 1, 1_000_000),
    }
  }
  return out
}

function readRepeatLimit(r: Reader, value: unknown): RepeatLimit | null {
  if (value === undefined || value === null) return null
  const path = 'budget.repeat_limit'
  const o = r.object(value, path, ['calls', 'window_seconds'])
  // A blank value (`calls:`) is as missing as an absent key: it must not read as a default limit.
  if ([o.calls, o.window_seconds].some((v) => v === undefined || v === null)) r.note(path, 'must set calls and window_seconds')
  return {
    calls: r.int(o.calls, join(path, 'calls'), 1, 1, 1_000_000),
    windowSeconds: r.number(o.window_seconds, join(path, 'window_seconds'), 60, 0, MAX_WINDOW_SECONDS, true),
  }
}

function entries(r: Reader, value: unknown, path: string): Array<[string, unknown, string]> {
  return Object.entries(r.map(value, path)).map(([name, child]) => {
    if (name.trim() === '') r.note(path, 'names must not be empty')
    return [name, child, join(path, name)]
  })
}
