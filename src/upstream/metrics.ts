import type { Counter, Gauge } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'
import { UPSTREAM_ERROR_KINDS, type UpstreamErrorKind } from './failures'
import type { ProbeResult } from './probe'

/** The upstream's metrics: its failures by kind, and its health probe's results. */
export class UpstreamMetrics extends FeatureMetrics {
  /** One child per kind, made up front: every kind is exported from the start (at 0), and a failure costs an array read. */
  private readonly upstreamErrorCounters: Record<UpstreamErrorKind, Counter.Internal>

  constructor(...args: ConstructorParameters<typeof FeatureMetrics>) {
    super(...args)
    const upstreamErrors = this.counter(
      'wardline_upstream_errors_total',
      'Forwarded requests the MCP server failed, by kind: unreachable (no connection; 502), timeout (no response headers within upstream.timeout_seconds; 504), reset (the connection closed or reset before the answer ended), bad_response (an answer that could not be parsed or relayed), other',
      ['kind'],
    )
    // labels() alone creates no series: a kind would first print at its first failure, and increase()
    // and rate() read that first sample as the start, so a one-off burst would never show (alerts.yml).
    for (const kind of UPSTREAM_ERROR_KINDS) upstreamErrors.inc({ kind }, 0)
    this.upstreamErrorCounters = Object.fromEntries(UPSTREAM_ERROR_KINDS.map((k) => [k, upstreamErrors.labels(k)])) as Record<
      UpstreamErrorKind,
      Counter.Internal
    >
  }

  /** One upstream failure (upstream/failures.ts): off the hot path, once per failed request. */
  upstreamError(kind: UpstreamErrorKind): void {
    this.upstreamErrorCounters[kind].inc()
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

  /** A server a reload removed: its probe series go, rather than report its last result for ever. */
  forgetServer(server: string): void {
    const gauges = this.probeGauges
    if (gauges === null) return
    for (const gauge of [gauges.up, gauges.duration, gauges.lastUp]) gauge.remove({ server })
  }

  private probeGauges: { up: Gauge<'server'>; duration: Gauge<'server'>; lastUp: Gauge<'server'> } | null = null
}
