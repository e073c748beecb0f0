import { FeatureMetrics } from '../metrics-registry'

/** The concurrency cap's metric. */
export class ConcurrencyMetrics extends FeatureMetrics {
  readonly concurrencyRefused = this.counter(
    'wardline_concurrency_refused_total',
    'Requests refused with 429 because their identity already had max_concurrent_per_identity requests in flight',
  )
}
