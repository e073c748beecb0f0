import type { Pool } from 'pg'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'

/** Advisory lock key of the budget reaper ('wlrp' as bytes); distinct from the migration lock. */
const REAPER_LOCK = 0x776c7270

/** How often and how much a BatchReaper deletes. */
export interface BatchReaperOptions {
  /** Time between runs. */
  readonly intervalMs?: number
  /** Rows deleted per statement (each its own short transaction). */
  readonly batchSize?: number
  /** Batches per run at most, so one run after a flood never holds a connection for long. */
  readonly maxBatches?: number
  /**
   * Time to the next run when a run stopped at maxBatches with rows left: a backlog (more than
   * batchSize × maxBatches per interval) is worked off in short runs instead of piling up.
   */
  readonly backlogDelayMs?: number
  /** Time from start() to the first run (default: intervalMs). */
  readonly firstRunDelayMs?: number
  /** Told after every run that deleted rows (a metric). */
  readonly onDeleted?: (rows: number) => void
}

/** What one kind of periodic cleanup deletes. */
export interface ReaperJob {
  /** For log lines: `<name> failed: will retry`. */
  readonly name: string
  /** Its own session advisory lock key: one replica at a time per job, jobs independent of each other. */
  readonly lockKey: number
  /** One DELETE of at most $1 rows; $2… are `params()`, read once per batch. */
  readonly sql: string
  readonly params?: () => readonly unknown[]
}

export interface ReapResult {
  /** False when another replica held the job's lock (it is deleting; this one skipped). */
  readonly ran: boolean
  readonly deleted: number
  /** True when the run stopped at maxBatches with its last batch full: rows are left. */
  readonly backlog: boolean
}

/**
 * Deletes rows off the request path, in bounded batches, by one replica at a time (a session
 * advisory lock taken with try: a replica that finds it held skips its turn instead of queueing).
 * Each batch is its own statement and transaction, so no run holds locks on many rows or a long
 * snapshot, and autovacuum can follow. Shared by the budget reaper and audit retention.
 */
export class BatchReaper {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<ReapResult> | null = null
  private readonly warn: RateLimitedLog
  private readonly batchSize: number
  private readonly maxBatches: number
  private readonly intervalMs: number
  private readonly backlogDelayMs: number

  constructor(
    private readonly pool: Pool,
    log: Logger,
    private readonly job: ReaperJob,
    private readonly options: BatchReaperOptions = {},
  ) {
    this.warn = new RateLimitedLog(log)
    this.batchSize = options.batchSize ?? 1000
    this.maxBatches = options.maxBatches ?? 20
    this.intervalMs = options.intervalMs ?? 60_000
    this.backlogDelayMs = options.backlogDelayMs ?? 1000
  }

  start(): void {
    this.schedule(this.options.firstRunDelayMs ?? this.intervalMs)
  }

  private schedule(delayMs: number): void {
    this.timer = setTimeout(() => {
      // Cannot reject: the first step handles a failed run, and the second only arms the next timer.
      void this.runOnce()
        .then(
          (result) => (result.backlog ? this.backlogDelayMs : this.intervalMs),
          (err: unknown) => {
            this.warn.warn(this.job.name, `${this.job.name} failed: will retry`, { cause: describeError(err) })
            return this.intervalMs
          },
        )
        .then((next) => {
          if (this.timer !== null) this.schedule(next) // close() clears the timer: no new run after it
        })
    }, delayMs)
    this.timer.unref()
  }

  async runOnce(): Promise<ReapResult> {
    this.running ??= this.reap().finally(() => {
      this.running = null
    })
    return this.running
  }

  async close(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    await this.running?.catch(() => undefined)
  }

  private async reap(): Promise<ReapResult> {
    const client = await this.pool.connect()
    let broken: Error | undefined
    let deleted = 0
    try {
      const got = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [this.job.lockKey])
      if (!got.rows[0].locked) return { ran: false, deleted: 0, backlog: false }
      try {
        let full = false
        for (let batch = 0; batch < this.maxBatches; batch++) {
          const result = await client.query(this.job.sql, [this.batchSize, ...(this.job.params?.() ?? [])])
          deleted += result.rowCount ?? 0
          full = (result.rowCount ?? 0) === this.batchSize
          if (!full) break
        }
        return { ran: true, deleted, backlog: full }
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [this.job.lockKey])
      }
    } catch (err) {
      broken = err as Error
      throw err
    } finally {
      // Counted even when a later batch failed: those rows are gone.
      if (deleted > 0) this.options.onDeleted?.(deleted)
      // A connection that failed mid-run may still hold the session lock: discard it, which frees it.
      client.release(broken)
    }
  }
}

export interface BudgetReaperOptions extends BatchReaperOptions {
  /**
   * The clock that says which windows have ended, as PostgresBudgetStore's: absent (production), the
   * database clock; a test injects one it moves forward instead of sleeping.
   */
  readonly clock?: () => Date
}

/**
 * Deletes budget_buckets rows whose window ended. Expired rows cost only disk until then: a check
 * treats them as absent. Rows a budget check is holding are skipped (SKIP LOCKED), so the reaper
 * never waits for a check nor makes one wait, and never takes part in a deadlock.
 */
export class BudgetReaper extends BatchReaper {
  constructor(pool: Pool, log: Logger, options: BudgetReaperOptions = {}) {
    const clock = options.clock
    super(
      pool,
      log,
      {
        name: 'budget reaper',
        lockKey: REAPER_LOCK,
        sql: `DELETE FROM budget_buckets WHERE key IN (
          SELECT key FROM budget_buckets
           WHERE ends_at <= ${clock ? '$2::timestamptz' : 'clock_timestamp()'}
           LIMIT $1 FOR UPDATE SKIP LOCKED)`,
        params: clock ? () => [clock()] : undefined,
      },
      options,
    )
  }
}
