import type { BucketLimit, BudgetConfig } from '../config/types'
import { serverKey, tenantKey, toolKey, windowKey } from './keys'
import type { BucketKind } from './store'

/**
 * One window of a bucket in the config, with everything the hot path needs computed at load time. A
 * bucket with several windows (budget.limits) is several of these in one tier, each counted on its own.
 */
export interface WindowSpec {
  readonly kind: BucketKind
  /** The tool, server or tenant name ('' for the identity tier, whose names come with each caller). */
  readonly name: string
  /** Its storage key; '' for the identity and repeat tiers, whose keys depend on the caller (windowKey of theirs). */
  readonly key: string
  readonly limit: number
  readonly windowSeconds: number
  /**
   * What callers and operators call this window: the kind (`identity`) when its tier has one window,
   * else the kind and length (`identity-86400s`). The RateLimit item name and the 429's `data.bucket`.
   */
  readonly label: string
  /** Its `RateLimit-Policy` item. */
  readonly policyItem: string
  /** Its `RateLimit` item up to the counts (`"label";r=`), which each response appends. */
  readonly rateLimitItemStart: string
}

export interface ToolSpec {
  /** The tool's own bucket windows; empty when it only has a cost. */
  readonly windows: readonly WindowSpec[]
  readonly cost: number
}

/** What applies to the calls of one server (`servers:`): its tools' buckets and costs, and its own bucket. */
export interface ServerPlan {
  /** By tool name as calls give it (budget.tools `<server>/<tool>`). */
  readonly tools: ReadonlyMap<string, ToolSpec>
  /** budget.servers.<name>'s windows; empty when it has none. */
  readonly windows: readonly WindowSpec[]
}

const NO_SERVER_BUDGET: ServerPlan = { tools: new Map(), windows: [] }

/** The budget config made ready for the hot path: built once per stage (at startup and each reload). */
export interface BudgetPlan {
  readonly identity: readonly WindowSpec[]
  readonly tenants: ReadonlyMap<string, readonly WindowSpec[]>
  /** With `upstream:`: the tools by name. Empty with `servers:`, whose tools are each server's. */
  readonly tools: ReadonlyMap<string, ToolSpec>
  /** With `servers:`: what applies per server, by name (a server with neither tool nor server bucket is absent). */
  readonly servers: ReadonlyMap<string, ServerPlan>
  /** `tools` as a ServerPlan with no server bucket: what applies with `upstream:`. */
  readonly unscoped: ServerPlan
  /** The loop breaker's window, or null when budget.repeat_limit is not set. */
  readonly repeat: WindowSpec | null
  /** True when some tool costs more than 1: reasons then speak of units, not requests. */
  readonly weighted: boolean
}

export function budgetPlan(config: BudgetConfig): BudgetPlan {
  const tenants = new Map<string, readonly WindowSpec[]>()
  for (const [name, limits] of Object.entries(config.tenants)) tenants.set(name, windows('tenant', name, tenantKey(name), limits))
  const tools = new Map<string, ToolSpec>()
  const servers = new Map<string, { tools: Map<string, ToolSpec>; windows: WindowSpec[] }>()
  const serverOf = (name: string): { tools: Map<string, ToolSpec>; windows: WindowSpec[] } => {
    let s = servers.get(name)
    if (s === undefined) servers.set(name, (s = { tools: new Map(), windows: [] }))
    return s
  }
  let weighted = false
  for (const tool of Object.values(config.tools)) {
    const spec = { windows: windows('tool', tool.tool, toolKey(tool.tool, tool.server), tool.limits), cost: tool.cost }
    ;(tool.server === null ? tools : serverOf(tool.server).tools).set(tool.tool, spec)
    if (tool.cost !== 1) weighted = true
  }
  for (const [name, limits] of Object.entries(config.servers))
    serverOf(name).windows.push(...windows('server', name, serverKey(name), limits))
  const repeat = config.repeatLimit
  return {
    identity: windows('identity', '', '', config.limits),
    tenants,
    tools,
    servers,
    unscoped: { tools, windows: [] },
    repeat:
      repeat === null ? null : windows('repeat', '', '', [{ requestsPerWindow: repeat.calls, windowSeconds: repeat.windowSeconds }])[0],
    weighted,
  }
}

/** What applies to a call on `server` (null: `upstream:`, whose tools are the plan's own). */
export function serverPlan(plan: BudgetPlan, server: string | null): ServerPlan {
  if (server === null) return plan.unscoped
  return plan.servers.get(server) ?? NO_SERVER_BUDGET
}

function windows(kind: BucketKind, name: string, bucketKey: string, limits: readonly BucketLimit[]): WindowSpec[] {
  return limits.map((limit) => {
    const label = limits.length === 1 ? kind : `${kind}-${limit.windowSeconds}s`
    return {
      kind,
      name,
      key: bucketKey === '' ? '' : windowKey(bucketKey, limit.windowSeconds),
      limit: limit.requestsPerWindow,
      windowSeconds: limit.windowSeconds,
      label,
      // The draft's w is an integer: a fractional window (tests, demos) is announced rounded up.
      policyItem: `"${label}";q=${limit.requestsPerWindow};w=${Math.max(1, Math.ceil(limit.windowSeconds))}`,
      rateLimitItemStart: `"${label}";r=`,
    }
  })
}

/**
 * The buckets a reload restarts: a window is a bucket keyed by its length (keys.ts), so one whose
 * length changed, or that was added, starts from zero, and one that was removed is forgotten. A changed
 * limit or cost keeps the count (the new limit applies to it). For the reload's log line.
 */
export function restartedBuckets(before: BudgetConfig, after: BudgetConfig): string[] {
  const out: string[] = []
  const compare = (what: string, a: readonly BucketLimit[], b: readonly BucketLimit[]): void => {
    const was = a.map((l) => l.windowSeconds)
    const now = b.map((l) => l.windowSeconds)
    const started = now.filter((w) => !was.includes(w))
    const ended = was.filter((w) => !now.includes(w))
    if (started.length === 0 && ended.length === 0) return
    const parts = [...started.map((w) => `new ${w}s window`), ...ended.map((w) => `${w}s window removed`)]
    out.push(`${what}: ${parts.join(', ')}`)
  }
  compare('identity buckets', before.limits, after.limits)
  for (const name of union(before.tenants, after.tenants)) {
    compare(`tenant ${JSON.stringify(name)}`, before.tenants[name] ?? [], after.tenants[name] ?? [])
  }
  for (const name of union(before.tools, after.tools)) {
    compare(`tool ${JSON.stringify(name)}`, before.tools[name]?.limits ?? [], after.tools[name]?.limits ?? [])
  }
  for (const name of union(before.servers, after.servers)) {
    compare(`server ${JSON.stringify(name)}`, before.servers[name] ?? [], after.servers[name] ?? [])
  }
  const repeat = (c: BudgetConfig): BucketLimit[] =>
    c.repeatLimit === null ? [] : [{ requestsPerWindow: c.repeatLimit.calls, windowSeconds: c.repeatLimit.windowSeconds }]
  compare('repeat buckets (budget.repeat_limit)', repeat(before), repeat(after))
  return out
}

function union(a: object, b: object): string[] {
  return [...new Set([...Object.keys(a), ...Object.keys(b)])]
}
