import { Counter } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'

/** The budget's metrics: checks that failed and how they were judged, refunds, and the shared store's round trips. */
export class BudgetMetrics extends FeatureMetrics {
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
  /** The shared budget store's counts (PostgresBudgetStore.stats), read at scrape time; none without one. */
  private budgetStoreStats: (() => { readonly checks: number; readonly statements: number }) | null = null

  constructor(...args: ConstructorParameters<typeof FeatureMetrics>) {
    super(...args)
    for (const reason of ['unserved', 'late_verdict']) this.budgetRefunds.inc({ reason }, 0)
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
}
