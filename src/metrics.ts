import { Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client'
import { DECISIONS, type Decision } from './pipeline/exchange'

const DURATION_BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/**
 * Every metric the gateway exports, on its own registry (never prom-client's global one).
 *
 * The per-request metrics are plain numbers that the registry reads only when /metrics is scraped:
 * prom-client's own inc() and observe() hash and validate their labels on every call, which cost
 * about 1 µs per request (3% of the gateway's CPU); the arrays take a few tens of ns.
 */
export class Metrics {
  readonly registry = new Registry()
  private readonly requests = new DecisionCounter(
    this.registry,
    'wardline_requests_total',
    'Proxied HTTP requests, by decision (a batch counts once; see wardline_audit_entries_total)',
  )
  private readonly auditEntries = new DecisionCounter(
    this.registry,
    'wardline_audit_entries_total',
    'Audit entries recorded, by decision (a forwarded batch writes one per gated element, plus one for the rest)',
  )
  private readonly duration = new DecisionHistogram(
    this.registry,
    'wardline_request_duration_seconds',
    'Time from request arrival to the end of the response, by decision (one observation per request)',
    DURATION_BUCKETS,
  )
  readonly budgetFailOpen = new Counter({
    name: 'wardline_budget_fail_open_total',
    help: 'Budget checks that failed and admitted the call anyway (budget.on_store_error: open)',
    registers: [this.registry],
  })
  readonly budgetDegraded = new Counter({
    name: 'wardline_budget_degraded_total',
    help: 'Budget checks that failed and were judged by this replica alone at limit ÷ live replicas (budget.on_store_error: local)',
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

  /** The shared budget store's counts (PostgresBudgetStore.stats), read at scrape time; none without one. */
  private budgetStoreStats: (() => { readonly checks: number; readonly statements: number }) | null = null

  constructor(defaults = false) {
    if (defaults) collectDefaultMetrics({ register: this.registry, prefix: 'wardline_' })
    // Coalescing at a glance: statements ÷ checks is the budget round trips per check (at most 1).
    const stats = (): { readonly checks: number; readonly statements: number } | null => this.budgetStoreStats?.() ?? null
    new Counter({
      name: 'wardline_budget_store_checks_total',
      help: 'Budget checks sent to the shared (Postgres) budget store',
      registers: [this.registry],
      collect() {
        this.reset()
        this.inc(stats()?.checks ?? 0)
      },
    })
    new Counter({
      name: 'wardline_budget_store_statements_total',
      help: 'Statements (round trips) that carried those checks: several checks share one under load',
      registers: [this.registry],
      collect() {
        this.reset()
        this.inc(stats()?.statements ?? 0)
      },
    })
  }

  /** Where wardline_budget_store_checks_total and _statements_total come from. */
  observeBudgetStore(stats: () => { readonly checks: number; readonly statements: number }): void {
    this.budgetStoreStats = stats
  }

  /** One finished request: its count and its latency, under the decision the request as a whole came to. */
  recordRequest(decision: Decision, seconds: number): void {
    // indexOf over six interned strings took ~5 ns where a Record<Decision, number> read took ~12 ns
    // (a keyed load with a changing key), measured in isolation.
    const i = DECISIONS.indexOf(decision)
    this.requests.add(i)
    this.duration.observe(i, seconds)
  }

  /** One audit entry written, under its own decision. */
  countEntry(decision: Decision): void {
    this.auditEntries.add(DECISIONS.indexOf(decision))
  }
}

/**
 * A counter by decision whose hot path is one array slot; its prom-client Counter copies the slots in
 * when the registry is scraped (collect()), so the text and JSON are prom-client's own.
 */
class DecisionCounter {
  private readonly counts = new Float64Array(DECISIONS.length)
  /** Decision indexes in the order first counted: prom-client printed label values in that order. */
  private readonly seen: number[] = []

  constructor(registry: Registry, name: string, help: string) {
    const { counts, seen } = this
    new Counter({
      name,
      help,
      labelNames: ['decision'] as const,
      registers: [registry],
      collect() {
        this.reset()
        for (const i of seen) this.inc({ decision: DECISIONS[i] }, counts[i])
      },
    })
  }

  add(i: number): void {
    if (this.counts[i]++ === 0) this.seen.push(i)
  }
}

interface HistogramSample {
  readonly labels: { readonly le?: number | '+Inf'; readonly decision: Decision }
  readonly value: number
  readonly metricName: string
}

/**
 * A histogram by decision kept in Float64Arrays. prom-client has no way to set a Histogram's buckets, so
 * this registers itself as a metric of its own: a Registry reads a metric only through `name`, `type`,
 * `get()` (prom-client's MetricObject: name, help, type, values, aggregator) and `reset()`
 * (prom-client 15, lib/registry.js). get() yields the samples prom-client's Histogram did, in its order:
 * per decision first observed, each bucket cumulative (`le` is inclusive), then +Inf, _sum and _count.
 */
class DecisionHistogram {
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  /** Per decision, how many observations fell in each bucket and no lower one (not cumulative). */
  private readonly buckets: Float64Array
  private readonly sums = new Float64Array(DECISIONS.length)
  private readonly counts = new Float64Array(DECISIONS.length)
  private readonly seen: number[] = []

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
  ) {
    this.buckets = new Float64Array(DECISIONS.length * bounds.length)
    registry.registerMetric(this as unknown as Metric)
  }

  observe(i: number, value: number): void {
    // prom-client's observe() threw here; the caller is the audit record, which must never fail over a metric.
    if (!Number.isFinite(value)) return
    if (this.counts[i]++ === 0) this.seen.push(i)
    this.sums[i] += value
    const bounds = this.bounds
    for (let b = 0; b < bounds.length; b++) {
      if (value <= bounds[b]) {
        this.buckets[i * bounds.length + b]++
        return
      }
    }
  }

  get(): Promise<{ name: string; help: string; type: string; values: HistogramSample[]; aggregator: string }> {
    const { name, bounds } = this
    const bucketName = `${name}_bucket`
    const values: HistogramSample[] = []
    for (const i of this.seen) {
      const decision = DECISIONS[i]
      let cumulative = 0
      for (let b = 0; b < bounds.length; b++) {
        cumulative += this.buckets[i * bounds.length + b]
        values.push({ labels: { le: bounds[b], decision }, value: cumulative, metricName: bucketName })
      }
      values.push({ labels: { le: '+Inf', decision }, value: this.counts[i], metricName: bucketName })
      values.push({ labels: { decision }, value: this.sums[i], metricName: `${name}_sum` })
      values.push({ labels: { decision }, value: this.counts[i], metricName: `${name}_count` })
    }
    return Promise.resolve({ name, help: this.help, type: this.type, values, aggregator: this.aggregator })
  }

  /** Registry.resetMetrics(). */
  reset(): void {
    this.buckets.fill(0)
    this.sums.fill(0)
    this.counts.fill(0)
    this.seen.length = 0
  }
}
