import type { Closer, Contribution } from '../feature'
import type { Logger } from '../log'
import type { UpstreamMetrics } from './metrics'
import type { ReadinessCheck } from '../readiness'
import { upstreamFailureReporter } from './failures'
import { Upstream, type UpstreamTarget } from './forward'
import { UpstreamProbe } from './probe'

/** One upstream server: its connection pool and, with upstream_health_check, its probe. */
export interface UpstreamFeature extends Contribution {
  readonly upstream: Upstream
  /** The probe's first run (which logs what it found); resolved at once without a probe. */
  readonly firstProbe: Promise<void>
  /** Stops the probe (also one of the closers); resolved at once without a probe. */
  readonly stopProbe: () => Promise<void>
}

/**
 * A server's own headers (its credentials) go with its probe too, as with every request to it, but
 * only to the server's own origin: a `health_check.url` elsewhere never receives them.
 */
function probeHeaders(config: UpstreamTarget): string[] {
  const headers = config.headers ?? {}
  const target = config.healthCheck?.url ?? config.url
  if (Object.keys(headers).length === 0 || new URL(target).origin !== new URL(config.url).origin) return []
  return Object.entries(headers).flat()
}

/**
 * Opens one upstream. `trustedProxies` is the listener's (http.trusted_proxies): whose X-Forwarded-*
 * chain is extended rather than replaced on the way there. The probe's first run starts now, while the
 * rest is wired; awaiting `firstProbe` before listening makes the first /readyz already know.
 */
export function openUpstream(
  config: UpstreamTarget,
  trustedProxies: readonly string[],
  metrics: UpstreamMetrics,
  log: Logger,
  /** The server's name (`servers:`), labelling its failure and probe series; null for the one `upstream:`. */
  server: string | null = null,
): UpstreamFeature {
  metrics.forServer(server)
  const upstream = new Upstream(
    config,
    trustedProxies,
    upstreamFailureReporter((kind) => metrics.upstreamError(kind, server), log, config.url),
  )
  // Closers run last to first: a named server's series go after its probe and pool have stopped, so
  // nothing sets them again. The one `upstream:` keeps its series to the end of the process.
  const closers: Closer[] = server === null ? [] : [() => metrics.releaseServer(server)]
  closers.push(() => upstream.destroy())
  const readiness: ReadinessCheck[] = []
  let firstProbe = Promise.resolve()
  let stopProbe = (): Promise<void> => Promise.resolve()
  const healthCheck = config.healthCheck
  if (healthCheck !== null) {
    const probe = new UpstreamProbe(healthCheck, config.url, log, metrics.upstreamProbeListener(server), probeHeaders(config))
    stopProbe = () => probe.close()
    closers.push(stopProbe)
    readiness.push(probe.readiness())
    firstProbe = probe.start()
  }
  return { upstream, firstProbe, stopProbe, closers, readiness }
}
