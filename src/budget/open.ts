import type { BudgetConfig, Config } from '../config/types'
import type { Closer, Contribution } from '../feature'
import { type Logger, RateLimitedLog } from '../log'
import type { BudgetMetrics } from './metrics'
import type { Stage } from '../pipeline/stage'
import type { PostgresFeature } from '../postgres/open'
import { BudgetReaper } from '../postgres/reaper'
import { restartedBuckets } from './buckets'
import { FailOpenWindow } from './fail-open-window'
import { LocalLimiter } from './local-limiter'
import { MemoryBudgetStore } from './memory-store'
import { PostgresBudgetStore } from './postgres-store'
import { budgetStage } from './stage'
import { StartingBudgetStore } from './starting-store'
import type { BudgetStore } from './store'

/** Budget enforcement: the store every route counts in, and the stage each route's budget config makes. */
export interface BudgetFeature extends Contribution {
  readonly store: BudgetStore
  /** The budget stage for one route's `budget:` (made again at every reload; the store and its counts stay). */
  stage(config: BudgetConfig): Stage
}

/**
 * The budget store: none while features.budget_enforcement is off (nothing counted), the one a test
 * injects, the shared Postgres store (with its reaper) when Postgres storage is on, else memory.
 */
export async function openBudget(
  config: Config,
  postgres: PostgresFeature | null,
  injected: BudgetStore | undefined,
  metrics: BudgetMetrics,
  log: Logger,
): Promise<BudgetFeature | null> {
  if (!config.features.budgetEnforcement) {
    if (config.budget.configured) log.warn('features.budget_enforcement is false: the budget: block is ignored and nothing is counted')
    return null
  }
  const closers: Closer[] = []
  let store: BudgetStore
  if (injected !== undefined) {
    store = injected
  } else if (postgres !== null) {
    store = await openPostgresBudget(postgres, config, metrics, log, closers)
  } else {
    store = new MemoryBudgetStore()
  }
  if (store instanceof MemoryBudgetStore) {
    log.info(
      'budgets are kept in memory: limits are per process, so each replica enforces them separately (features.postgres_storage shares them)',
    )
  }
  closers.push(() => store.close())
  // The local limiter too (on_store_error: local), so a reload during an outage keeps its counts and
  // the shared counts it remembered; made even when the config says open, as a reload may say local.
  const failures = {
    failOpens: new FailOpenWindow(Date.now),
    degraded: new FailOpenWindow(Date.now),
    warnings: new RateLimitedLog(log),
    localLimiter: new LocalLimiter(),
  }
  return {
    store,
    closers,
    stage: (budget) => budgetStage(store, budget, metrics, log, failures),
    // Checks that failed open and checks judged locally in the last minute, and `budget_store`:
    // `degraded` while checks are judged locally, `failing_open` while they fail open, else `ok`.
    readyDetails() {
      const failOpens = failures.failOpens.count()
      const degraded = failures.degraded.count()
      return {
        budget_fail_opens_last_minute: failOpens,
        budget_degraded_checks_last_minute: degraded,
        budget_store: degraded > 0 ? 'degraded' : failOpens > 0 ? 'failing_open' : 'ok',
      }
    },
    onReload(before, after) {
      const restarted = restartedBuckets(before.budget, after.budget)
      if (restarted.length > 0)
        log.warn('budget windows whose length changed start counting afresh; the rest keep their counts', { buckets: restarted })
    },
  }
}

/**
 * The shared budget store with its reaper, behind a StartingBudgetStore: until Postgres storage is
 * brought up every check fails at once (budget.on_store_error decides), then it only delegates.
 */
async function openPostgresBudget(
  postgres: PostgresFeature,
  config: Config,
  metrics: BudgetMetrics,
  log: Logger,
  closers: Closer[],
): Promise<BudgetStore> {
  const { pool, bringUp } = postgres
  const store = new PostgresBudgetStore(pool, {
    checkTimeoutMs: config.budget.checkTimeoutSeconds * 1000,
    log,
    onRefunded: () => metrics.budgetRefunds.labels('late_verdict').inc(),
  })
  metrics.observeBudgetStore(() => store.stats())
  const reaper = new BudgetReaper(pool, log)
  closers.push(() => reaper.close())
  // The clock offset, then this replica's first heartbeat and its timer (a migrated schema first: the
  // heartbeat table is migration 004's).
  bringUp.add({ name: 'budget store', run: () => store.start() })
  // A step of its own: the bring-up checks for a shutdown between steps, so no reaper starts after close.
  bringUp.add({ name: 'budget reaper', run: () => reaper.start() })
  try {
    await bringUp.startupAttempt(postgres.failsClosed)
  } catch (err) {
    await reaper.close()
    throw err
  }
  return new StartingBudgetStore(store, bringUp)
}
