import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/** Every metric the gateway exports, on its own registry (never prom-client's global one). */
export class Metrics {
  readonly registry = new Registry()
  readonly requests = new Counter({
    name: 'wardline_requests_total',
    help: 'Proxied HTTP requests, by decision (a batch counts once; see wardline_audit_entries_total)',
    labelNames: ['decision'] as const,
    registers: [this.registry],
  })
  readonly auditEntries = new Counter({
    name: 'wardline_audit_entries_total',
    help: 'Audit entries recorded, by decision (a forwarded batch writes one per gated element, plus one for the rest)',
    labelNames: ['decision'] as const,
    registers: [this.registry],
  })
  readonly duration = new Histogram({
    name: 'wardline_request_duration_seconds',
    help: 'Time from request arrival to the end of the response, by decision (one observation per request)',
    labelNames: ['decision'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  })
  readonly budgetFailOpen = new Counter({
    name: 'wardline_budget_fail_open_total',
    help: 'Budget checks that failed and admitted the call anyway (budget.on_store_error: open)',
    registers: [this.registry],
  })
  readonly budgetRefunds = new Counter({
    name: 'wardline_budget_refunds_total',
    help: 'Admitted budget checks taken back: unserved (the MCP server never served the call) or late_verdict (a Postgres verdict that arrived after the gateway stopped waiting)',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  })
  readonly budgetRefundFailures = new Counter({
    name: 'wardline_budget_refund_failures_total',
    help: 'Refunds of unserved calls that the budget store could not apply (the charge stays until its window ends)',
    registers: [this.registry],
  })
  readonly budgetStoreErrors = new Counter({
    name: 'wardline_budget_store_errors_total',
    help: 'Budget checks that failed, whatever on_store_error then decided',
    registers: [this.registry],
  })
  readonly concurrencyRefused = new Counter({
    name: 'wardline_concurrency_refused_total',
    help: 'Requests refused with 429 because their identity already had max_concurrent_per_identity requests in flight',
    registers: [this.registry],
  })
  readonly auditDropped = new Counter({
    name: 'wardline_audit_dropped_total',
    help: 'Audit entries that could not be written or queued, by sink',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  })
  readonly auditSpilled = new Counter({
    name: 'wardline_audit_spilled_total',
    help: 'Audit entries written to the local spill file because their sink kept failing (replayed later), by sink',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  })
  readonly auditReplayed = new Counter({
    name: 'wardline_audit_replayed_total',
    help: 'Spilled audit entries written into their sink by a replay of the spill file, by sink',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  })
  readonly auditRejected = new Counter({
    name: 'wardline_audit_rejected_total',
    help: 'Spilled audit entries their sink refused for their data, moved to the quarantine file <spill_file>.rejected, by sink',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  })
  readonly auditQueued = new Gauge({
    name: 'wardline_audit_queue_entries',
    help: 'Audit entries waiting to be written, by sink',
    labelNames: ['sink'] as const,
    registers: [this.registry],
  })
  readonly auditBackpressure = new Counter({
    name: 'wardline_audit_backpressure_total',
    help: 'Requests refused with 503 (WL_AUDIT_BACKPRESSURE) because an audit queue had no room to reserve their entries',
    registers: [this.registry],
  })

  constructor(defaults = false) {
    if (defaults) collectDefaultMetrics({ register: this.registry, prefix: 'wardline_' })
  }
}
