import { DEFAULT_TENANT, checkPrincipal } from '../auth/principal'
import { identityKey, serverKey, tenantKey, toolKey, windowKey } from '../budget/keys'
import type { BucketKind, BucketReading, BucketSelection, BudgetStore } from '../budget/store'
import type { BucketLimit, BudgetConfig, ToolBudget } from '../config/types'
import { hasControlCharacters } from '../pipeline/exchange'
import { targetValue } from './revocations'
import { type AdminAnswer, type AdminRequest, onTarget } from './server'

/** What the budget routes need from the running gateway. */
export interface BudgetAdminParts {
  /** Null while features.budget_enforcement is false (nothing is counted). */
  readonly store: BudgetStore | null
  /** The budget config in force now (a reload changes it). */
  readonly config: () => BudgetConfig
  /** `this replica` for memory budgets, `all replicas` for the shared Postgres table. */
  readonly scope: string
}

/** One bucket window an operator asked about: what it is, and where its count lives. */
interface BucketView {
  readonly kind: BucketKind
  /** The identity, tenant, tool or server; for a repeat bucket the identity. */
  readonly name: string
  /** A tool bucket's server (`servers:`, key `<server>/<tool>`); a server bucket's is its name. */
  readonly server?: string
  /** The identity's tenant (identity and repeat buckets). */
  readonly tenant?: string
  /** A repeat bucket's call fingerprint (tool and arguments, hashed). */
  readonly call?: string
  readonly limit: number
  readonly windowSeconds: number
}

const PARAMETERS = ['identity', 'tenant', 'tool', 'server', 'kind']
const KINDS: readonly BucketKind[] = ['identity', 'tenant', 'tool', 'server', 'repeat']
/** A server name (config/spec.ts SERVER_NAME's length), with room to say it is unknown. */
const MAX_SERVER_BYTES = 64
const MAX_TOOL_BYTES = 1024

interface Filters {
  readonly identity: string | null
  readonly tenant: string | null
  readonly tool: string | null
  readonly server: string | null
  readonly kind: BucketKind | null
}

/** A query the routes refuse with 400 and this message. */
class BadQuery extends Error {}

/**
 * GET /budgets: every bucket window that applies to the filters, with its limit, use and reset.
 *  - identity (tenant `default` unless given): its identity windows (budget.limits), its repeat buckets
 *    (budget.repeat_limit) and its tenant's bucket if that tenant is under budget.tenants;
 *  - tenant alone: that tenant's bucket; tool: that tool's bucket (budget.tools with limits; with
 *    servers, `<server>/<tool>`, or a bare tool name for its bucket on every server, or on `server`);
 *  - server: that server's bucket (budget.servers) and its tools' buckets;
 *  - no filter: every tenant, tool and server bucket the config lists.
 * `kind=` keeps one kind of bucket.
 */
export function getBudgets(parts: BudgetAdminParts): (req: AdminRequest) => Promise<AdminAnswer> {
  return async (req) => {
    const checked = prepare(parts, req, false)
    if ('status' in checked) return checked
    const { store, views, selection, filters, notes } = checked
    const readings = await onTarget(describeFilters(filters), store.inspect?.(selection) ?? Promise.resolve([]))
    const buckets = readings.map((r) => render(viewOf(r.key, views, parts.config()), r))
    return {
      status: 200,
      body: { scope: parts.scope, tenant: tenantRead(filters), buckets, notes },
      target: describeFilters(filters),
      reason: `${buckets.length} bucket${buckets.length === 1 ? '' : 's'} read`,
    }
  }
}

/**
 * DELETE /budgets: resets the buckets GET shows for the same filters (at least one filter: a reset of
 * everything is not offered), except that with an identity the shared tenant and tool buckets are kept
 * unless `kind` names them; for this replica (memory) or every replica (Postgres). Returns what it
 * reset, with what each had used.
 */
export function resetBudgets(parts: BudgetAdminParts): (req: AdminRequest) => Promise<AdminAnswer> {
  return async (req) => {
    const checked = prepare(parts, req, true)
    if ('status' in checked) return checked
    const { store, views, selection, filters, notes } = checked
    const readings = await onTarget(describeFilters(filters), store.reset?.(selection) ?? Promise.resolve([]))
    const reset = readings.map((r) => render(viewOf(r.key, views, parts.config()), r))
    const summary = reset.map((b) => `${b.kind} ${JSON.stringify(b.name)} ${b.window_seconds}s (used ${b.used})`).join(', ')
    return {
      status: 200,
      body: { scope: parts.scope, tenant: tenantRead(filters), reset, notes },
      target: describeFilters(filters),
      reason: reset.length === 0 ? `nothing to reset (${parts.scope})` : `reset ${summary} (${parts.scope})`,
    }
  }
}

type Prepared =
  | AdminAnswer
  | {
      readonly store: BudgetStore
      readonly views: Map<string, BucketView>
      readonly selection: BucketSelection
      readonly filters: Filters
      readonly notes: string[]
    }

function prepare(parts: BudgetAdminParts, req: AdminRequest, resetting: boolean): Prepared {
  let filters: Filters
  try {
    filters = readFilters(req.query)
  } catch (err) {
    if (!(err instanceof BadQuery)) throw err
    return refusal(400, err.message)
  }
  const target = describeFilters(filters)
  if (resetting && filters.identity === null && filters.tenant === null && filters.tool === null && filters.server === null) {
    return {
      ...refusal(400, 'name the buckets to reset with identity, tenant, tool or server (resetting every bucket at once is not offered)'),
      target,
    }
  }
  const store = parts.store
  if (store === null) {
    return {
      ...refusal(409, 'budgets are not enforced (features.budget_enforcement is false): there are no buckets to show or reset'),
      target,
    }
  }
  if (resetting ? store.reset === undefined : store.inspect === undefined) {
    return { ...refusal(501, `this budget store cannot ${resetting ? 'reset' : 'show'} buckets`), target }
  }
  const notes: string[] = []
  const views = bucketsFor(parts.config(), filters, notes, resetting)
  const config = parts.config()
  const prefixes: string[] = []
  if (filters.identity !== null && config.repeatLimit !== null && (filters.kind === null || filters.kind === 'repeat')) {
    prefixes.push(repeatPrefix(filters.tenant ?? DEFAULT_TENANT, filters.identity))
  }
  return { store, views, selection: { keys: [...views.keys()], prefixes }, filters, notes }
}

function refusal(status: number, message: string): AdminAnswer {
  return { status, body: { error: message }, reason: message }
}

function readFilters(query: URLSearchParams): Filters {
  for (const name of new Set(query.keys())) {
    if (!PARAMETERS.includes(name))
      throw new BadQuery(`unknown query parameter ${JSON.stringify(name)} (allowed: ${PARAMETERS.join(', ')})`)
    if (query.getAll(name).length > 1) throw new BadQuery(`query parameter ${name} is given more than once`)
  }
  const principal = (kind: 'identity' | 'tenant'): string | null => {
    const value = query.get(kind)
    if (value === null) return null
    const problem = checkPrincipal(kind, value)
    if (problem !== null) throw new BadQuery(problem)
    return value
  }
  const identity = principal('identity')
  const tenant = principal('tenant')
  const tool = query.get('tool')
  if (tool !== null && (tool === '' || hasControlCharacters(tool) || Buffer.byteLength(tool) > MAX_TOOL_BYTES)) {
    throw new BadQuery(`tool must be a tool name (1 to ${MAX_TOOL_BYTES} bytes, no control characters)`)
  }
  const server = query.get('server')
  if (server !== null && (server === '' || hasControlCharacters(server) || Buffer.byteLength(server) > MAX_SERVER_BYTES)) {
    throw new BadQuery(`server must be a server name (1 to ${MAX_SERVER_BYTES} bytes, no control characters)`)
  }
  const kind = query.get('kind')
  if (kind !== null && !(KINDS as readonly string[]).includes(kind)) throw new BadQuery(`kind must be one of ${KINDS.join(', ')}`)
  return { identity, tenant, tool, server, kind: kind as BucketKind | null }
}

/**
 * The configured bucket windows the filters select, by storage key. A reset that names an identity
 * leaves the shared buckets (its tenant's, a tool's) alone unless `kind` asks for them: resetting one
 * caller must not hand every other caller of the tenant or tool a fresh window.
 */
function bucketsFor(config: BudgetConfig, f: Filters, notes: string[], resetting: boolean): Map<string, BucketView> {
  const views = new Map<string, BucketView>()
  const sharedKept = resetting && f.identity !== null && f.kind === null
  const wants = (kind: BucketKind): boolean => {
    if (sharedKept && (kind === 'tenant' || kind === 'tool' || kind === 'server')) return false
    return f.kind === null || f.kind === kind
  }
  const add = (
    kind: BucketKind,
    bucketKey: string,
    name: string,
    limits: readonly BucketLimit[],
    tenant?: string,
    server?: string,
  ): void => {
    if (!wants(kind)) return
    for (const l of limits) {
      views.set(windowKey(bucketKey, l.windowSeconds), {
        kind,
        name,
        tenant,
        server,
        limit: l.requestsPerWindow,
        windowSeconds: l.windowSeconds,
      })
    }
  }
  const addTool = (tool: ToolBudget): void =>
    add('tool', toolKey(tool.tool, tool.server), tool.tool, tool.limits, undefined, tool.server ?? undefined)
  const tenant = f.tenant ?? (f.identity !== null ? DEFAULT_TENANT : null)
  if (f.identity !== null && tenant !== null) add('identity', identityKey(tenant, f.identity), f.identity, config.limits, tenant)
  if (tenant !== null) {
    const limits = config.tenants[tenant]
    if (limits !== undefined && sharedKept) {
      notes.push(`tenant ${JSON.stringify(tenant)}'s shared bucket is kept: reset it with tenant alone, or kind=tenant`)
    } else if (limits !== undefined) add('tenant', tenantKey(tenant), tenant, limits)
    else if (f.kind === null || f.kind === 'tenant')
      notes.push(`tenant ${JSON.stringify(tenant)} has no bucket of its own (it is not under budget.tenants)`)
  }
  if (f.server !== null) {
    const limits = Object.hasOwn(config.servers, f.server) ? config.servers[f.server] : undefined
    if (limits !== undefined && sharedKept) {
      notes.push(`server ${JSON.stringify(f.server)}'s shared bucket is kept: reset it with server alone, or kind=server`)
    } else if (limits !== undefined) add('server', serverKey(f.server), f.server, limits, undefined, f.server)
    else if (f.kind === null || f.kind === 'server')
      notes.push(`server ${JSON.stringify(f.server)} has no bucket of its own (it is not under budget.servers)`)
    // The server's tools too, unless a tool filter picks among them below.
    if (f.tool === null && !sharedKept) {
      for (const tool of Object.values(config.tools)) if (tool.server === f.server && tool.limits.length > 0) addTool(tool)
    }
  }
  if (f.tool !== null) {
    // A key as written (`search`, or with servers `docs/search`), or with servers a bare tool name: its
    // bucket on every server, or on the server asked for.
    const matches = Object.entries(config.tools)
      .filter(([key, tool]) =>
        tool.server === null ? key === f.tool : key === f.tool || (tool.tool === f.tool && (f.server === null || tool.server === f.server)),
      )
      .map(([, tool]) => tool)
      .filter((tool) => tool.limits.length > 0)
    if (matches.length > 0 && sharedKept) {
      notes.push(`tool ${JSON.stringify(f.tool)}'s shared bucket is kept: reset it with tool alone, or kind=tool`)
    } else if (matches.length > 0) for (const tool of matches) addTool(tool)
    else if (f.kind === null || f.kind === 'tool')
      notes.push(`tool ${JSON.stringify(f.tool)} has no bucket of its own (it is not under budget.tools with limits)`)
    if (f.identity !== null && config.repeatLimit !== null && wants('repeat')) {
      notes.push('repeat buckets are listed for every tool of the identity: their keys hold a hash of the call, not the tool name')
    }
  }
  if (f.identity === null && f.tenant === null && f.tool === null && f.server === null) {
    for (const [name, limits] of Object.entries(config.tenants)) add('tenant', tenantKey(name), name, limits)
    for (const tool of Object.values(config.tools)) addTool(tool)
    for (const [name, limits] of Object.entries(config.servers)) add('server', serverKey(name), name, limits, undefined, name)
  }
  return views
}

/** The start of every repeat bucket key of one caller: keys.ts's JSON array, open after the identity. */
function repeatPrefix(tenant: string, identity: string): string {
  return `${JSON.stringify(['repeat', tenant, identity]).slice(0, -1)},`
}

/** The view of a key: a configured one, else a repeat bucket read back from its key. */
function viewOf(key: string, views: Map<string, BucketView>, config: BudgetConfig): BucketView {
  const known = views.get(key)
  if (known !== undefined) return known
  let parts: unknown[] = []
  try {
    parts = JSON.parse(key) as unknown[]
  } catch {
    // not a key this version writes: shown as it is below
  }
  const [, tenant, identity, call, windowSeconds] = parts
  return {
    kind: 'repeat',
    name: typeof identity === 'string' ? identity : key,
    tenant: typeof tenant === 'string' ? tenant : undefined,
    call: typeof call === 'string' ? call : undefined,
    limit: config.repeatLimit?.calls ?? 0,
    windowSeconds: typeof windowSeconds === 'number' ? windowSeconds : (config.repeatLimit?.windowSeconds ?? 0),
  }
}

/** One bucket as the API answers it (snake_case, as the rest of the wire). */
export interface BucketReport {
  readonly kind: BucketKind
  readonly name: string
  readonly tenant?: string
  /** With servers: a tool bucket's server, or a server bucket's own name. */
  readonly server?: string
  readonly call?: string
  readonly window_seconds: number
  readonly limit: number
  readonly used: number
  readonly remaining: number
  /** Seconds until the window ends; null with no open window (the next call opens a full one). */
  readonly reset_seconds: number | null
  readonly reset_at: string | null
}

function render(view: BucketView, r: BucketReading): BucketReport {
  const reset = r.resetSeconds === null ? null : Math.round(r.resetSeconds * 1000) / 1000
  return {
    kind: view.kind,
    name: view.name,
    ...(view.tenant === undefined ? {} : { tenant: view.tenant }),
    ...(view.server === undefined ? {} : { server: view.server }),
    ...(view.call === undefined ? {} : { call: view.call }),
    window_seconds: view.windowSeconds,
    limit: view.limit,
    used: r.used,
    remaining: Math.max(0, view.limit - r.used),
    reset_seconds: reset,
    reset_at: reset === null ? null : new Date(Date.now() + reset * 1000).toISOString(),
  }
}

/**
 * The tenant the answer is about (`tenant` of GET and DELETE /budgets): the one given, `default` for an
 * identity given without one (as for a token without a tenant claim), null when no tenant applies. It
 * is in the answer so that `wardline budget show --identity alice` says which alice it read.
 */
function tenantRead(f: Filters): string | null {
  return f.tenant ?? (f.identity !== null ? DEFAULT_TENANT : null)
}

function describeFilters(f: Filters): string {
  const parts: string[] = []
  if (f.identity !== null) parts.push(`identity=${targetValue(f.identity)}`)
  if (f.tenant !== null) parts.push(`tenant=${targetValue(f.tenant)}`)
  if (f.tool !== null) parts.push(`tool=${targetValue(f.tool)}`)
  if (f.server !== null) parts.push(`server=${targetValue(f.server)}`)
  if (f.kind !== null) parts.push(`kind=${f.kind}`)
  return parts.join(' ')
}
