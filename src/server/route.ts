import type { AuditTrail } from '../audit/trail'
import type { Config } from '../config/types'
import type { Contribution } from '../feature'
import type { Logger } from '../log'
import type { UpstreamMetrics } from '../upstream/metrics'
import { openUpstream } from '../upstream/open'
import { type RouteConfig, type SharedStages, buildChain, routeStages } from './chain'
import { Gateway } from './gateway'
import { lingerBounds } from './linger'

/** One route: its upstream, the chain its config makes, and the Gateway that runs requests through them. */
export interface RouteFeature extends Contribution {
  /** What it was opened with: a reload compares a server's new settings with these. */
  readonly config: RouteConfig
  readonly gateway: Gateway
  /** The upstream probe's first run: awaited before listening, so the first /readyz already knows. */
  readonly firstProbe: Promise<void>
  /** Stops the probe alone (a route a reload retired: its connections stay for the requests still running). */
  readonly stopProbe: () => Promise<void>
  /** Swaps in the chain `next` makes; requests already running keep the chain they started with. */
  reload(next: RouteConfig): void
}

/**
 * Opens one route over the shared stages. `config` gives what every route shares (the listener's
 * trusted proxies, the body cap); `route` what is this route's own.
 */
export function openRoute(
  route: RouteConfig,
  config: Config,
  shared: SharedStages,
  audit: AuditTrail,
  metrics: UpstreamMetrics,
  log: Logger,
): RouteFeature {
  const opened = openUpstream(route.upstream, config.http.trustedProxies, metrics, log, route.server)
  // The request metrics this route counts in, labelled with its server's name: found once here, so a
  // request pays no lookup. Let go last (closers run last to first), after the upstream's own.
  const series = audit.seriesFor(route.server)
  const server = route.server
  const closers = server === null ? opened.closers : [() => audit.releaseSeries(server), ...(opened.closers ?? [])]
  const own = routeStages()
  const gateway = new Gateway(
    buildChain(route, shared, own),
    opened.upstream,
    audit,
    log,
    route.toolRefusals,
    own.legacyStreams,
    lingerBounds(config.limits.maxBodyBytes),
    route.server,
    route.server === null ? null : new URL(route.upstream.url).origin,
    series,
  )
  return {
    ...opened,
    closers,
    config: route,
    gateway,
    reload: (next) => gateway.replaceStages(buildChain(next, shared, own), next.toolRefusals),
  }
}
