import { Counter } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'

/** The session bindings' metrics. */
export class SessionMetrics extends FeatureMetrics {
  readonly sessionRefused = new Counter({
    name: 'wardline_session_refused_total',
    help: 'Requests refused with 404 because they presented a session id another principal created',
    registers: [this.registry],
  })
  readonly sessionBindingsEvicted = new Counter({
    name: 'wardline_session_bindings_evicted_total',
    help: 'Session bindings forgotten before they idled out because max_sessions (full) or max_sessions_per_identity (identity_full) was reached',
    labelNames: ['cause'] as const,
    registers: [this.registry],
  })
}
