import type { BucketLimit, BudgetConfig, RepeatLimit, ToolBudget } from './types'
import type { TSchema } from '@sinclair/typebox'
import type { Node, Reader } from './reader'
import { join } from './reader'
import { readBlock, readKey, readLeaf } from './read-node'
import { BUDGET, entryOf, keyNode, keysOf } from './spec'

export { MAX_WINDOW_SECONDS } from './spec'

const TENANT = entryOf(BUDGET.properties.tenants)
/** The keys that give a bucket its windows: the pair or `limits`. */
const LIMIT_KEYS = keysOf(TENANT)
const TOOL = entryOf(BUDGET.properties.tools)
const SERVER = entryOf(BUDGET.properties.servers)
const WINDOW = (BUDGET.properties.limits as unknown as { items: TSchema }).items

/** Windows per bucket: a minute, an hour, a day and a month fit with room to spare. */
const MAX_WINDOWS = 8

const DEFAULT_LIMIT: BucketLimit = { requestsPerWindow: 100, windowSeconds: 60 }

/**
 * The `budget:` block at `path`. `servers`: the names under `servers:`, which then scope tool keys
 * (`<server>/<tool>`) and name the server buckets; null with `upstream:` (a tool key is then a tool's
 * name, whatever it holds, `/` included).
 */
export function readBudget(r: Reader, value: unknown, path = 'budget', servers: readonly string[] | null = null): BudgetConfig {
  const o = readBlock(r, BUDGET, value, path)
  const top = readLimits(r, o, BUDGET, path, [DEFAULT_LIMIT])
  return {
    configured: value !== undefined && value !== null,
    limits: top,
    tenants: readTenants(r, o.tenants, join(path, 'tenants'), top),
    tools: readTools(r, o.tools, join(path, 'tools'), top, servers),
    servers: readServerBuckets(r, o.servers, join(path, 'servers'), top, servers),
    repeatLimit: readRepeatLimit(r, o.repeat_limit, join(path, 'repeat_limit')),
    checkTimeoutSeconds: readKey(r, BUDGET, o, 'check_timeout_seconds', path),
    onStoreError: readKey(r, BUDGET, o, 'on_store_error', path),
  }
}

/**
 * A bucket's windows: `limits:` (a list of pairs) or the single `requests_per_window` /
 * `window_seconds` pair, never both. A key of the pair left out takes the inherited value, which must
 * then be a single window too.
 */
function readLimits(r: Reader, o: Node, node: TSchema, path: string, inherited: readonly BucketLimit[]): BucketLimit[] {
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
  return [readPair(r, o, node, path, inherited[0] ?? DEFAULT_LIMIT)]
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
    const o = readBlock(r, WINDOW, item, itemPath)
    if ([o.requests_per_window, o.window_seconds].some((v) => v === undefined || v === null)) {
      r.note(itemPath, 'must set requests_per_window and window_seconds')
      return
    }
    const limit = readPair(r, o, WINDOW, itemPath, DEFAULT_LIMIT)
    // Each window is a bucket keyed by its length (budget/keys.ts): two of one length would be one bucket.
    if (lengths.has(limit.windowSeconds)) r.note(join(itemPath, 'window_seconds'), `${limit.windowSeconds} is listed twice`)
    lengths.add(limit.windowSeconds)
    out.push(limit)
  })
  return out
}

/** The pair of `node` (a bucket or a window of a list); a key left out takes `fallback` (the inherited window). */
function readPair(r: Reader, o: Node, node: TSchema, path: string, fallback: BucketLimit): BucketLimit {
  const key = (name: string, value: number): number => readLeaf(r, keyNode(node, name), o[name], join(path, name), value as never) as number
  return {
    requestsPerWindow: key('requests_per_window', fallback.requestsPerWindow),
    // Fractions are allowed so tests and demos can use sub-second windows.
    windowSeconds: key('window_seconds', fallback.windowSeconds),
  }
}

function readTenants(r: Reader, value: unknown, at: string, top: readonly BucketLimit[]): Record<string, readonly BucketLimit[]> {
  const out = Object.create(null) as Record<string, readonly BucketLimit[]>
  for (const [name, child, path] of entries(r, value, at)) {
    // One level only: an override holds limits, never further overrides.
    const o = readBlock(r, TENANT, child, path)
    if (child === null || child === undefined) r.note(path, 'must set requests_per_window and window_seconds, or limits')
    out[name] = readLimits(r, o, TENANT, path, top)
  }
  return out
}

/** A tool entry has a bucket of its own unless it sets only `cost`. */
function readTools(
  r: Reader,
  value: unknown,
  at: string,
  top: readonly BucketLimit[],
  servers: readonly string[] | null,
): Record<string, ToolBudget> {
  const out = Object.create(null) as Record<string, ToolBudget>
  for (const [name, child, path] of entries(r, value, at)) {
    const o = readBlock(r, TOOL, child, path)
    if (child === null || child === undefined) r.note(path, 'must set requests_per_window and window_seconds, limits, or cost')
    const costOnly = o.cost !== undefined && LIMIT_KEYS.every((k) => o[k] === undefined)
    out[name] = {
      limits: costOnly ? [] : readLimits(r, o, TOOL, path, top),
      cost: readLeaf(r, keyNode(TOOL, 'cost'), o.cost, join(path, 'cost')) as number,
      ...scopeOf(r, name, path, servers),
    }
  }
  return out
}

/**
 * Which server's calls a tool key applies to. With `servers:` a key is `<server>/<tool>`, split at its
 * first `/` (a server name holds none, a tool name may): the same tool name on two servers is two
 * tools, and a bare name would leave unsaid which server's tool it limits. With `upstream:` the key is
 * the tool's name as it stands.
 */
function scopeOf(r: Reader, key: string, path: string, servers: readonly string[] | null): { server: string | null; tool: string } {
  if (servers === null) return { server: null, tool: key }
  const slash = key.indexOf('/')
  if (slash < 0) {
    const forms = servers.slice(0, 3).map((s) => `${s}/${key}`)
    const write = forms.length === 0 ? `<server>/${key}` : forms.join(' or ') + (servers.length > forms.length ? ' or …' : '')
    r.note(path, `with servers, tool buckets are named <server>/<tool>: write ${write}`)
    return { server: null, tool: key }
  }
  const server = key.slice(0, slash)
  const tool = key.slice(slash + 1)
  if (!servers.includes(server)) {
    r.note(
      path,
      `${JSON.stringify(server)} is not one of servers (${servers.join(', ') || 'none'}): tool buckets are named <server>/<tool>`,
    )
  }
  if (tool === '') r.note(path, `names no tool after ${JSON.stringify(server + '/')}`)
  return { server, tool }
}

/** `budget.servers`: one bucket per server named under `servers:`, shared by all its callers. */
function readServerBuckets(
  r: Reader,
  value: unknown,
  at: string,
  top: readonly BucketLimit[],
  servers: readonly string[] | null,
): Record<string, readonly BucketLimit[]> {
  const out = Object.create(null) as Record<string, readonly BucketLimit[]>
  if (servers === null && value !== undefined && value !== null) {
    r.note(at, 'is only used with servers (with upstream alone, limit the whole gateway with budget.limits or budget.tenants)')
  }
  for (const [name, child, path] of entries(r, value, at)) {
    const o = readBlock(r, SERVER, child, path)
    if (child === null || child === undefined) r.note(path, 'must set requests_per_window and window_seconds, or limits')
    else if (servers !== null && !servers.includes(name)) r.note(path, `must name one of servers (${servers.join(', ') || 'none'})`)
    out[name] = readLimits(r, o, SERVER, path, top)
  }
  return out
}

function readRepeatLimit(r: Reader, value: unknown, path: string): RepeatLimit | null {
  if (value === undefined || value === null) return null
  const node = BUDGET.properties.repeat_limit
  const o = readBlock(r, node, value, path)
  // A blank value (`calls:`) is as missing as an absent key: it must not read as a default limit.
  if ([o.calls, o.window_seconds].some((v) => v === undefined || v === null)) r.note(path, 'must set calls and window_seconds')
  return {
    calls: readKey(r, node, o, 'calls', path, 1),
    windowSeconds: readKey(r, node, o, 'window_seconds', path, 60),
  }
}

function entries(r: Reader, value: unknown, path: string): Array<[string, unknown, string]> {
  return Object.entries(r.map(value, path)).map(([name, child]) => {
    if (name.trim() === '') r.note(path, 'names must not be empty')
    return [name, child, join(path, name)]
  })
}
