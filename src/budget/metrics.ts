import { FeatureMetrics } from '../metrics-registry'

/** The budget's metrics: checks that failed and how they were judged, refunds, and the shared store's round trips. */
export class BudgetMetrics extends FeatureMetrics {
  readonly budgetFailOpen = this.counter(
    'wardline_budget_fail_open_total',
    'Budget checks that failed and admitted the call anyway (budget.on_store_error: open)',
  )
  readonly budgetDegraded = this.counter(
    'wardline_budget_degraded_total',
    'Budget checks that failed and were judged by this replica alone at limit ÷ live replicas (budget.on_store_error: local)',
  )
  readonly budgetRefunds = this.counter(
    'wardline_budget_refunds_total',
    'Admitted budget checks taken back: unserved (the MCP server never served the call) or late_verdict (a Postgres verdict that arrived after the gateway stopped waiting)',
    ['reason'],
  )
  readonly budgetRefundFailures = this.counter(
    'wardline_budget_refund_failures_total',
    'Refunds of unserved calls that the budget store could not apply (the charge stays until its window ends)',
  )
  readonly budgetStoreErrors = this.counter(
    'wardline_budget_store_errors_total',
    'Budget checks that failed, whatever on_store_error then decided',
  )
  /** The shared budget store's counts (PostgresBudgetStore.stats), read at scrape time; none without one. */
  private budgetStoreStats: (() => { readonly checks: number; readonly statements: number }) | null = null

  constructor(...args: ConstructorParameters<typeof FeatureMetrics>) {
    super(...args)
    for (const reason of ['unserved', 'late_verdict']) this.budgetRefunds.inc({ reason }, 0)
    // Coalescing at a glance: statements ÷ checks is the budget round trips per check (at most 1).
    const stats = (): { readonly checks: number; readonly statements: number } | null => this.budgetStoreStats?.() ?? null
    this.counter('wardline_budget_store_checks_total', 'Budget checks sent to the shared (Postgres) budget store', [], {
      collect() {
        this.reset()
        this.inc(stats()?.checks ?? 0)
      },
    })
    this.counter(
      'wardline_budget_store_statements_total',
      'Statements (round trips) that carried those checks: several checks share one under load',
      [],
      {
        collect() {
          this.reset()
          this.inc(stats()?.statements ?? 0)
        },
      },
    )
  }

  /** Where wardline_budget_store_checks_total and _statements_total come from. */
  observeBudgetStore(stats: () => { readonly checks: number; readonly statements: number }): void {
    this.budgetStoreStats = stats
  }
}
