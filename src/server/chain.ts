import type { AuditFeature } from '../audit/open'
import type { AuthFeature } from '../auth/open'
import type { BudgetFeature } from '../budget/open'
import { ConcurrencyLimiter } from '../concurrency/limiter'
import { type ConcurrencyStages, concurrencyStages } from '../concurrency/stage'
import type { BudgetConfig, Config, PolicyConfig, ServerConfig, ToolRefusals, UpstreamConfig } from '../config/types'
import { pathStage } from '../http/path-stage'
import { httpStage } from '../http/stage'
import { mcpHeadersStage } from '../jsonrpc/mcp-headers'
import { jsonRpcStage } from '../jsonrpc/stage'
import type { Logger } from '../log'
import type { GatewayMetrics } from './compose'
import type { Stage } from '../pipeline/stage'
import { compilePolicy } from '../policy/compile'
import { type ListFilterState, listFilterStage, listFilterState } from '../policy/list-filter'
import { policyStage, policyVerdictStage } from '../policy/stage'
import { sessionStages } from '../session/stage'
import { LegacyStreams } from '../upstream/legacy-streams'
import { legacyEndpointStage } from './legacy-endpoint'

/**
 * What one route is configured with: its server (where it is, its timeouts, connections and
 * headers) and the rules every route reads (who may call what, what a call costs, how a refusal is
 * answered: one rule set for every server, whose rules say which servers they cover). Auth, the audit
 * trail, sessions, the concurrency cap and the Postgres pool are shared by every route.
 */
export interface RouteConfig {
  /** The server's name (`servers:`); null for the one `upstream:`. */
  readonly server: string | null
  readonly upstream: UpstreamConfig | ServerConfig
  readonly budget: BudgetConfig
  readonly policy: PolicyConfig | null
  readonly toolRefusals: ToolRefusals
}

/** The routes a config describes: one per server in `servers:`, or the one `upstream:`. */
export function routesOf(config: Config): RouteConfig[] {
  const rules = { budget: config.budget, policy: config.policy, toolRefusals: config.toolRefusals }
  if (config.upstream !== null) return [{ server: null, upstream: config.upstream, ...rules }]
  return config.servers.map((server) => ({ server: server.name, upstream: server, ...rules }))
}

/** The longest time any route allows for an upstream's response head. */
export function longestTimeoutSeconds(config: Config): number {
  return Math.max(config.upstream?.timeoutSeconds ?? 0, ...config.servers.map((s) => s.timeoutSeconds))
}

/**
 * The stages every route shares, made once per process from the shared features: what they hold
 * (session bindings, requests in flight per identity) outlives a reload and spans routes.
 */
export interface SharedStages {
  readonly http: Stage
  readonly auth: Stage
  readonly revocation: Stage
  readonly sessions: readonly Stage[]
  readonly concurrency: ConcurrencyStages
  readonly path: Stage
  readonly jsonrpc: Stage
  readonly mcpHeaders: Stage
  readonly auditReservation: Stage
  /** Each route's budget stage, counted in the one store; null while features.budget_enforcement is off. */
  readonly budget: ((config: BudgetConfig) => Stage) | null
  /**
   * A reload's servers: a longer timeout than any so far raises what a legacy POST may owe its stream.
   * Never lowered: a removed server's streams run on until they end.
   */
  noteTimeouts(config: Config): void
}

export interface SharedFeatures {
  readonly auth: AuthFeature
  readonly audit: AuditFeature
  readonly budget: BudgetFeature | null
}

export function sharedStages(
  config: Config,
  features: SharedFeatures,
  metrics: GatewayMetrics,
  log: Logger,
  sessionClock?: () => number,
): SharedStages {
  const { auth, audit, budget } = features
  let longest = longestTimeoutSeconds(config)
  return {
    http: httpStage(config.http),
    auth: auth.auth,
    revocation: auth.revocation,
    sessions: sessionStages(config.limits, metrics.session, log, sessionClock),
    // One limiter for the process, so the counts of requests in flight survive a reload
    // (max_concurrent_per_identity itself is a restart key). What a legacy POST owes its stream is
    // bounded by the upstream's timeout: the longest of any server's so far, so no server's legacy
    // stream loses its slot early.
    concurrency: concurrencyStages(new ConcurrencyLimiter(config.limits.maxConcurrentPerIdentity), metrics.concurrency, () => longest),
    path: pathStage(),
    jsonrpc: jsonRpcStage(config.limits),
    mcpHeaders: mcpHeadersStage(),
    auditReservation: audit.reservation,
    budget: budget === null ? null : (cfg) => budget.stage(cfg),
    noteTimeouts: (next) => {
      longest = Math.max(longest, longestTimeoutSeconds(next))
    },
  }
}

/** What a route keeps across reloads: made once per route, read by every chain built for it. */
export interface RouteStages {
  /** The list filter of every chain judges with the policy of the latest one, so a stream opened before a reload lists by the new rules. */
  readonly policies: ListFilterState
  /**
   * Read only while refusals are answered as tool results: a refused legacy POST's result travels on
   * its session's /sse stream. One registry across reloads, so every stream is found.
   */
  readonly legacyStreams: LegacyStreams
  readonly legacyReader: Stage
}

export function routeStages(): RouteStages {
  const legacyStreams = new LegacyStreams()
  return { policies: listFilterState(), legacyStreams, legacyReader: legacyStreams.stage() }
}

/**
 * The order of one route's request stages, made from that route's config: the one place the order is
 * decided. Called once per route at startup and again at every reload with the route's new config.
 */
export function buildChain(route: RouteConfig, shared: SharedStages, own: RouteStages): Stage[] {
  const budget = shared.budget === null ? [] : [shared.budget(route.budget)]
  const policy = policyStages(route.policy, route.server, own.policies)
  return [
    // Host and Origin first: a DNS-rebinding page gets nothing, not even a 401 challenge.
    shared.http,
    shared.auth,
    // On every request, a token answered from the token cache included: a revocation applies at once.
    shared.revocation,
    // A legacy (`sse`) server's endpoint event, rewritten to come back through this route before any
    // later reader learns a session from it; one that cannot ends the stream before any does.
    ...legacyEndpoint(route),
    // Before the body is read: a caller presenting a session another principal created gets 404.
    ...shared.sessions,
    // Before the body is read: a capped caller cannot make the gateway buffer bodies without bound.
    shared.concurrency.slot,
    shared.path,
    shared.jsonrpc,
    // Right after parsing: Mcp-Method / Mcp-Name that disagree with the body are refused before an
    // audit reservation or a budget unit is taken for a call whose headers say another.
    shared.mcpHeaders,
    // Once parsed: a body read past the cap goes on only as an `initialize`, a listen or a client's
    // answers; before anything is charged or reserved.
    shared.concurrency.verdict,
    shared.auditReservation,
    ...(route.toolRefusals === 'result' ? [own.legacyReader] : []),
    // Policy judges first, so the budget stage knows a denied call (it charges only the caller's own
    // bucket), and its verdict is answered after the budget: a call over budget gets 429 (principles.md, What a call costs).
    ...policy,
    ...budget,
    ...(policy.length === 0 ? [] : [policyVerdictStage]),
  ]
}

/** The endpoint rewriter of a `transport: sse` server's streams (legacy-endpoint.ts); none for any other route. */
function legacyEndpoint(route: RouteConfig): Stage[] {
  const upstream = route.upstream
  if (route.server === null || !('transport' in upstream) || upstream.transport !== 'sse') return []
  return [legacyEndpointStage(route.server, upstream.url, upstream.messagePath)]
}

/**
 * Says, once per startup and per reload (not once per route), what policy the chains judge by: no
 * policy is a warning that nothing is gated.
 */
export function logPolicy(policy: PolicyConfig | null, log: Logger): void {
  if (policy === null) log.warn('no policy configured (policy or policy_file): every tool, resource and prompt call is allowed')
  else log.info('policy loaded', { source: policy.source, rules: policy.rules.length, default: policy.default })
}

/**
 * The policy stage (its verdict is answered after the budget stage) and the list filter. No policy: no
 * stage. A policy that allows everything hides nothing: no filter.
 */
function policyStages(policy: PolicyConfig | null, server: string | null, policies: ListFilterState): Stage[] {
  policies.current = null
  if (policy === null) return []
  // Compiled for this route's server: the policy stage and the list filter of a route judge its
  // server's calls and lists by the rules that cover it, and never read another's.
  const compiled = compilePolicy(policy, server)
  if (!policy.filterLists) return [policyStage(compiled)]
  // While the policy can deny nothing the filter passes every answer as it is; it stays in the chain
  // so a stream opened now is filtered once a reload adds a deny rule.
  if (compiled.canDeny) policies.current = compiled
  return [policyStage(compiled), listFilterStage(policies)]
}
