import { Registry, collectDefaultMetrics } from 'prom-client'

/**
 * The one registry /metrics prints (never prom-client's global one), with the process's own figures
 * (`wardline_process_*`, `wardline_nodejs_*`) when `processMetrics` is set (a served gateway, not a test).
 * Each feature registers its metrics on it from its own folder (budget/metrics.ts, audit/metrics.ts, …),
 * so adding a metric touches the feature that counts it and nothing shared.
 */
export function metricsRegistry(processMetrics = false): Registry {
  const registry = new Registry()
  if (processMetrics) collectDefaultMetrics({ register: registry, prefix: 'wardline_' })
  return registry
}

/**
 * A feature's metrics, registered on the registry given (a fresh one when none is: a test of one
 * feature). Subclasses create their metrics in field initializers, which run once `registry` is set.
 */
export abstract class FeatureMetrics {
  constructor(readonly registry: Registry = metricsRegistry()) {}
}
