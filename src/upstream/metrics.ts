import type { Counter, Gauge } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'
import { UPSTREAM_ERROR_KINDS, type UpstreamErrorKind } from './failures'
import type { ProbeResult } from './probe'

/** One server's wardline_upstream_errors_total children, one per kind, and the routes holding them. */
interface ServerErrors {
  readonly counters: Record<UpstreamErrorKind, Counter.Internal>
  users: number
}

/**
 * The upstreams' metrics: their failures by kind, and their health probes' results. With `servers:`
 * every series carries the server's name as `server`; with `upstream:` alone none has the label, so
 * the output is what it was before servers existed.
 */
export class UpstreamMetrics extends FeatureMetrics {
  private readonly upstreamErrors = this.counter(
    'wardline_upstream_errors_total',
    'Forwarded requests the MCP server failed, by kind: unreachable (no connection; 502), timeout (no response headers within upstream.timeout_seconds; 504), reset (the connection closed or reset before the answer ended), bad_response (an answer that could not be parsed or relayed), other',
    ['kind', 'server'],
  )
  /** Per server (null: the one `upstream:`), its children, made when its first route opens (forServer). */
  private readonly servers = new Map<string | null, ServerErrors>()

  /**
   * Makes the failure series of one server (null: the one `upstream:`, unlabelled) when its first route
   * opens, each kind printed at 0 from then on: labels() alone creates no series, so a kind would first
   * print at its first failure, and increase() and rate() read that first sample as the start, so a
   * one-off burst would never show (alerts.yml). Every route opened under a name shares its series
   * (a reload that changes a server's settings keeps its counts); releaseServer lets go.
   */
  forServer(server: string | null): void {
    const known = this.servers.get(server)
    if (known !== undefined) {
      known.users++
      return
    }
    const counters = {} as Record<UpstreamErrorKind, Counter.Internal>
    for (const kind of UPSTREAM_ERROR_KINDS) {
      const labels = server === null ? { kind } : { kind, server }
      this.upstreamErrors.inc(labels, 0)
      counters[kind] = this.upstreamErrors.labels(labels)
    }
    this.servers.set(server, { counters, users: 1 })
  }

  /**
   * A route of `server` closed. Once none is left (a reload removed the server) its failure and probe
   * series are removed: a server gone from the config must not read as down, or as failing, forever.
   */
  releaseServer(server: string): void {
    const errors = this.servers.get(server)
    if (errors === undefined || --errors.users > 0) return
    this.servers.delete(server)
    for (const kind of UPSTREAM_ERROR_KINDS) this.upstreamErrors.remove({ kind, server })
    this.forgetServer(server)
  }

  /** One upstream failure (upstream/failures.ts) of `server` (null: the one `upstream:`): off the hot path, once per failed request. */
  upstreamError(kind: UpstreamErrorKind, server: string | null = null): void {
    const errors = this.servers.get(server)
    if (errors !== undefined) errors.counters[kind].inc()
    else this.upstreamErrors.inc(server === null ? { kind } : { kind, server })
  }

  /**
   * wardline_upstream_up, wardline_upstream_probe_duration_seconds and
   * wardline_upstream_last_up_timestamp_seconds, set from each result of the upstream probe (the
   * listener returned). Registered only here, so with the probe off none of them exists: an alert on
   * wardline_upstream_up == 0 cannot fire on a gateway that does not probe.
   */
  upstreamProbeListener(server: string | null = null): (result: ProbeResult) => void {
    const gauges = (this.probeGauges ??= {
      up: this.gauge(
        'wardline_upstream_up',
        "1 when the upstream's last health probe got an answer below 500, 0 when it got a 5xx, a timeout or no connection (upstream_health_check)",
        ['server'],
      ),
      duration: this.gauge(
        'wardline_upstream_probe_duration_seconds',
        "How long the upstream's last health probe took, to the answer's head or the failure",
        ['server'],
      ),
      lastUp: this.gauge(
        'wardline_upstream_last_up_timestamp_seconds',
        'Unix time of the last health probe that found the upstream up (0: none since start)',
        ['server'],
      ),
    })
    // With `upstream:` alone the series carry no label, as they always have; each server's its name.
    const labels = server === null ? {} : { server }
    return (result) => {
      gauges.up.set(labels, result.up ? 1 : 0)
      gauges.duration.set(labels, result.durationSeconds)
      if (result.up) gauges.lastUp.set(labels, result.at / 1000)
    }
  }

  /**
   * A server a reload removed: its probe series go at once (its probe stopped with the reload), rather
   * than report its last result for ever; its failure series go when its last route closes (releaseServer).
   */
  forgetServer(server: string): void {
    const gauges = this.probeGauges
    if (gauges === null) return
    for (const gauge of [gauges.up, gauges.duration, gauges.lastUp]) gauge.remove({ server })
  }

  private probeGauges: { up: Gauge<'server'>; duration: Gauge<'server'>; lastUp: Gauge<'server'> } | null = null
}
