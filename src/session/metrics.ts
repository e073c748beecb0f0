import { FeatureMetrics } from '../metrics-registry'

/** The session bindings' metrics. */
export class SessionMetrics extends FeatureMetrics {
  readonly sessionRefused = this.counter(
    'wardline_session_refused_total',
    'Requests refused with 404 because they presented a session id another principal created',
  )
  readonly sessionBindingsEvicted = this.counter(
    'wardline_session_bindings_evicted_total',
    'Session bindings forgotten before they idled out because max_sessions (full) or max_sessions_per_identity (identity_full) was reached',
    ['cause'],
  )
}
