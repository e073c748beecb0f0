import { Counter } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'

/** The concurrency cap's metric. */
export class ConcurrencyMetrics extends FeatureMetrics {
  readonly concurrencyRefused = new Counter({
    name: 'wardline_concurrency_refused_total',
    help: 'Requests refused with 429 because their identity already had max_concurrent_per_identity requests in flight',
    registers: [this.registry],
  })
}
