import {
  Counter,
  type CounterConfiguration,
  Gauge,
  type GaugeConfiguration,
  Histogram,
  type HistogramConfiguration,
  Registry,
  collectDefaultMetrics,
} from 'prom-client'

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

  /** A counter on this feature's registry; `more` takes prom-client's other settings (collect…). */
  protected counter<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
    more: Partial<CounterConfiguration<L>> = {},
  ): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry], ...more })
  }

  /** A gauge on this feature's registry. */
  protected gauge<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
    more: Partial<GaugeConfiguration<L>> = {},
  ): Gauge<L> {
    return new Gauge({ name, help, labelNames, registers: [this.registry], ...more })
  }

  /** A histogram on this feature's registry. */
  protected histogram<L extends string = never>(
    name: string,
    help: string,
    labelNames: readonly L[] = [],
    more: Partial<HistogramConfiguration<L>> = {},
  ): Histogram<L> {
    return new Histogram({ name, help, labelNames, registers: [this.registry], ...more })
  }
}
