import type { BucketLimit, BudgetConfig } from './types'
import type { Reader } from './reader'
import { join } from './reader'

const LIMIT_KEYS = ['requests_per_window', 'window_seconds']

/** Fixed windows up to a day: longer ones are better served by quotas than by a rate limiter. */
const MAX_WINDOW_SECONDS = 86_400

export function readBudget(r: Reader, value: unknown): BudgetConfig {
  const o = r.object(value, 'budget', [...LIMIT_KEYS, 'tenants', 'tools', 'check_timeout_seconds', 'on_store_error'])
  const top = readLimit(r, o, 'budget', { requestsPerWindow: 100, windowSeconds: 60 })
  return {
    configured: value !== undefined && value !== null,
    ...top,
    tenants: readOverrides(r, o.tenants, 'budget.tenants', top),
    tools: readOverrides(r, o.tools, 'budget.tools', top),
    // 5 s: long enough to ride out a pool wait under a burst, short enough that a hung database
    // degrades to "fail open" before an MCP client's own request timeout fires.
    checkTimeoutSeconds: r.number(o.check_timeout_seconds, 'budget.check_timeout_seconds', 5, 0, 60, true),
    onStoreError: r.oneOf(o.on_store_error, 'budget.on_store_error', ['open', 'closed'] as const, 'open'),
  }
}

function readLimit(r: Reader, o: Record<string, unknown>, path: string, fallback: BucketLimit): BucketLimit {
  return {
    requestsPerWindow: r.int(o.requests_per_window, join(path, 'requests_per_window'), fallback.requestsPerWindow, 1, 1_000_000_000),
    // Fractions are allowed so tests and demos can use sub-second windows.
    windowSeconds: r.number(o.window_seconds, join(path, 'window_seconds'), fallback.windowSeconds, 0, MAX_WINDOW_SECONDS, true),
  }
}

function readOverrides(r: Reader, value: unknown, path: string, top: BucketLimit): Record<string, BucketLimit> {
  const out = Object.create(null) as Record<string, BucketLimit>
  for (const [name, child] of Object.entries(r.map(value, path))) {
    const childPath = join(path, name)
    if (name.trim() === '') r.note(path, 'names must not be empty')
    // One level only: an override holds limits, never further overrides.
    const o = r.object(child, childPath, LIMIT_KEYS)
    if (child === null || child === undefined) r.note(childPath, 'must set requests_per_window and window_seconds')
    out[name] = readLimit(r, o, childPath, top)
  }
  return out
}
