import type { Pool } from 'pg'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'

/** Advisory lock key of the reaper ('wlrp' as bytes); distinct from the migration lock. */
const REAPER_LOCK = 0x776c7270

export interface BudgetReaperOptions {
  /** Time between runs. Expired rows cost only disk until then: a check treats them as absent. */
  readonly intervalMs?: number
  /** Rows deleted per statement (each its own short transaction). */
  readonly batchSize?: number
  /** Batches per run at most, so one run after a flood never holds a connection for long. */
  readonly maxBatches?: number
  /**
   * Time to the next run when a run stopped at maxBatches with expired rows left: a flood of new keys
   * (more than batchSize × maxBatches per interval) is worked off in short runs instead of piling up.
   */
  readonly backlogDelayMs?: number
  /**
   * The clock that says which windows have ended, as PostgresBudgetStore's: absent (production), the
   * database clock; a test injects one it moves forward instead of sleeping.
   */
  readonly clock?: () => Date
}

export interface ReapResult {
  /** False when another replica held the reaper lock (it is reaping; this one skipped). */
  readonly ran: boolean
  readonly deleted: number
  /** True when the run stopped at maxBatches with its last batch full: expired rows are left. */
  readonly backlog: boolean
}

/**
 * Deletes budget_buckets rows whose window ended, off the request path, in bounded batches, by one
 * replica at a time (a session advisory lock taken with try: a replica that finds it held skips its
 * turn instead of queueing). Rows a budget check is holding are skipped (SKIP LOCKED), so the reaper
 * never waits for a check nor makes one wait, and never takes part in a deadlock.
 */
export class BudgetReaper {
  private timer: NodeJS.Timeout | null = null
  private running: Promise<ReapResult> | null = null
  private readonly warn: RateLimitedLog
  private readonly batchSize: number
  private readonly maxBatches: number
  private readonly intervalMs: number
  private readonly backlogDelayMs: number
  /** The batch DELETE, its clock fixed at construction: clock_timestamp(), or a test clock's parameter. */
  private readonly deleteSql: string

  constructor(
    private readonly pool: Pool,
    log: Logger,
    private readonly options: BudgetReaperOptions = {},
  ) {
    this.warn = new RateLimitedLog(log)
    this.batchSize = options.batchSize ?? 1000
    this.maxBatches = options.maxBatches ?? 20
    this.intervalMs = options.intervalMs ?? 60_000
    this.backlogDelayMs = options.backlogDelayMs ?? 1000
    this.deleteSql = `DELETE FROM budget_buckets WHERE key IN (
      SELECT key FROM budget_buckets
       WHERE ends_at <= ${options.clock ? '$2::timestamptz' : 'clock_timestamp()'}
       LIMIT $1 FOR UPDATE SKIP LOCKED)`
  }

  start(): void {
    this.schedule(this.intervalMs)
  }

  private schedule(delayMs: number): void {
    this.timer = setTimeout(() => {
      // Cannot reject: the first step handles a failed run, and the second only arms the next timer.
      void this.runOnce()
        .then(
          (result) => (result.backlog ? this.backlogDelayMs : this.intervalMs),
          (err: unknown) => {
            this.warn.warn('budget-reaper', 'budget reaper failed: will retry', { cause: describeError(err) })
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
    try {
      const got = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [REAPER_LOCK])
      if (!got.rows[0].locked) return { ran: false, deleted: 0, backlog: false }
      try {
        let deleted = 0
        let full = false
        for (let batch = 0; batch < this.maxBatches; batch++) {
          const clock = this.options.clock
          const result = await client.query(this.deleteSql, clock ? [this.batchSize, clock()] : [this.batchSize])
          deleted += result.rowCount ?? 0
          full = (result.rowCount ?? 0) === this.batchSize
          if (!full) break
        }
        return { ran: true, deleted, backlog: full }
      } finally {
        await client.query('SELECT pg_advisory_unlock($1)', [REAPER_LOCK])
      }
    } catch (err) {
      broken = err as Error
      throw err
    } finally {
      // A connection that failed mid-run may still hold the session lock: discard it, which frees it.
      client.release(broken)
    }
  }
}
