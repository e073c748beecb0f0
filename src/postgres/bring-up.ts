import { WardlineError, describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'

/** One thing Postgres storage needs before it serves (reachable, migrated, budget store started…). */
export interface BringUpStep {
  readonly name: string
  run(): Promise<void> | void
}

export interface BringUpOptions {
  /** Pause before the first background attempt; doubles after each failed one, up to maxRetryDelayMs. */
  readonly retryDelayMs?: number
  readonly maxRetryDelayMs?: number
  /**
   * How long close() waits for an attempt in flight. Each step is bounded on its own (the reachability
   * check by POSTGRES_STARTUP_TIMEOUT_MS, connections by the pool), but a migration is not cut short
   * (a long one is legitimate), so a shutdown waits this long at most and then lets it go: the pool's
   * end, right after, fails it.
   */
  readonly closeWaitMs?: number
}

/**
 * Brings Postgres storage up: an ordered list of steps, each run until it succeeds once and never
 * again after. Each Postgres feature adds its steps as it opens (postgres/open.ts) and runs each part at once (startupAttempt):
 * with budget.on_store_error closed a failure stops startup, as it always did. Otherwise the gateway
 * serves without the database (budget checks fall back, audit entries spill), and after launch() the
 * steps left are retried in the background, every second at first, backing off to every 5 seconds,
 * until all of them have succeeded.
 *
 * While not ready, `notReadyError()` is the error a budget check gets at once (StartingBudgetStore):
 * a check must not wait for a connection that will not come, nor reach a schema that is not there.
 */
export class PostgresBringUp {
  private readonly steps: BringUpStep[] = []
  /** Steps that have succeeded, a prefix of `steps`. */
  private done = 0
  /** Why the last attempt stopped; null once every step has succeeded (or before any failed). */
  private failure: { cause: string; error: WardlineError } | null = null
  private attemptCount = 0
  private failedAttempts = 0
  private launched = false
  private onReady: (() => void) | null = null
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private closed = false
  private readonly warn: RateLimitedLog
  private readonly retryDelayMs: number
  private readonly maxRetryDelayMs: number
  private readonly closeWaitMs: number

  constructor(log: Logger, options: BringUpOptions = {}) {
    this.warn = new RateLimitedLog(log)
    this.retryDelayMs = options.retryDelayMs ?? 1000
    this.maxRetryDelayMs = options.maxRetryDelayMs ?? 5000
    this.closeWaitMs = options.closeWaitMs ?? 3000
  }

  add(step: BringUpStep): void {
    this.steps.push(step)
  }

  /** True once every step added has succeeded. */
  get ready(): boolean {
    return this.failure === null && this.done === this.steps.length
  }

  /** Why storage is not ready (the last attempt's failure), or null when it is. */
  get cause(): string | null {
    return this.ready ? null : (this.failure?.cause ?? 'starting')
  }

  /** Attempts so far, the one at startup included. */
  get attempts(): number {
    return this.attemptCount
  }

  /**
   * The error every budget check gets while storage is not ready, or null when it is. One object per
   * failed attempt, not one per check: a replica serving through an outage refuses thousands a second.
   */
  notReadyError(): Error | null {
    if (this.ready) return null
    return this.failure?.error ?? new WardlineError('WL_POSTGRES_UNAVAILABLE', 'postgres not ready: starting')
  }

  /**
   * While wiring: runs the steps added so far, unless one already failed (the background attempts then
   * run them all, in order). A failure rejects only when `failFast` (on_store_error: closed).
   */
  async startupAttempt(failFast: boolean): Promise<void> {
    if (this.failure !== null) return
    try {
      await this.attempt()
    } catch (err) {
      if (failFast) throw err
    }
  }

  /**
   * Called once wiring is done: from now on `onReady` is called when every step has succeeded (at once
   * when they already have), and a bring-up that failed is retried in the background.
   */
  launch(onReady: () => void): void {
    this.launched = true
    this.onReady = onReady
    if (this.ready) this.becameReady()
    else this.schedule()
  }

  /** Stops retrying; waits (bounded by closeWaitMs) for an attempt in flight. Steps not started never run. */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    const running = this.running
    if (running === null) return
    let timer: NodeJS.Timeout | undefined
    const gaveUp = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.closeWaitMs)
      timer.unref()
    })
    await Promise.race([running, gaveUp])
    clearTimeout(timer)
  }

  /** Runs the steps not done yet, in order; rejects with the first failure, which is kept as the cause. */
  private async attempt(): Promise<void> {
    this.attemptCount++
    const work = this.runSteps()
    this.running = work.then(
      () => undefined,
      () => undefined,
    )
    try {
      await work
    } finally {
      this.running = null
    }
  }

  private async runSteps(): Promise<void> {
    try {
      while (this.done < this.steps.length) {
        // A shutdown stops here: nothing is started (a reaper, a heartbeat) after its closer ran.
        if (this.closed) throw new Error('the gateway is shutting down')
        await this.steps[this.done].run()
        this.done++
      }
    } catch (err) {
      const cause = causeOf(err)
      // No `cause` property: the text already holds it, and describeError would repeat it in every audit reason.
      this.failure = { cause, error: new WardlineError('WL_POSTGRES_UNAVAILABLE', `postgres not ready: ${cause}`) }
      throw err
    }
    this.failure = null
  }

  private schedule(): void {
    if (this.closed) return
    const delayMs = Math.min(this.maxRetryDelayMs, this.retryDelayMs * 2 ** this.failedAttempts)
    this.timer = setTimeout(() => {
      this.timer = null
      this.attempt().then(
        () => this.becameReady(),
        (err: unknown) => {
          this.failedAttempts++
          if (!this.closed) {
            this.warn.warn('postgres-bring-up', 'postgres still not ready: retrying', {
              cause: causeOf(err),
              attempts: this.attemptCount,
            })
          }
          this.schedule()
        },
      )
    }, delayMs)
    // The listener keeps a serving process alive; a bring-up alone must not keep a finished one.
    this.timer.unref()
  }

  private becameReady(): void {
    if (!this.launched || this.closed || !this.ready) return
    const onReady = this.onReady
    this.onReady = null
    onReady?.()
  }
}

/**
 * One line saying why a step failed. Our own errors already carry their cause's text in the message
 * (a failed migration) or name it (unreachable: connect ECONNREFUSED…); their code is left out, since
 * the not-ready error that quotes this has it.
 */
function causeOf(err: unknown): string {
  if (!(err instanceof WardlineError)) return describeError(err)
  const why = err.cause === undefined ? '' : describeError(err.cause)
  return why === '' || err.message.includes(why) ? err.message : `${err.message}: ${why}`
}
