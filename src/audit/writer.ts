import { setTimeout as sleep } from 'node:timers/promises'
import { withDeadline } from '../deadline'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'
import type { AuditEntry } from './entry'
import type { AuditSink } from './sink'
import type { AuditSpill } from './spill'

export interface AuditWriterOptions {
  /**
   * Entries held in memory, reserved slots included: past it reserve() says no (the call gets 503)
   * and entries recorded without a reservation are dropped and counted.
   */
  readonly maxQueueEntries: number
  /** Entries handed to the sink at once. */
  readonly batchSize?: number
  /**
   * With a spill file, attempts per batch before it is spilled. Without one a batch is retried until
   * it is written (its calls were forwarded on that promise), except while closing: then it gets this
   * many more attempts and is dropped (counted) after them.
   */
  readonly maxAttempts?: number
  /** First retry delay; doubles per attempt up to 5 s. */
  readonly retryDelayMs?: number
  readonly onDropped?: (count: number, sink: string) => void
  /**
   * Where batches go once the sink has failed maxAttempts times in a row, instead of being dropped;
   * they are replayed into the sink when it answers again. Set for the Postgres sink.
   */
  readonly spill?: AuditSpill
  /** How often a spilled backlog is retried while the sink is down. */
  readonly replayIntervalMs?: number
  readonly onSpilled?: (count: number, sink: string) => void
  /**
   * Longest one batch may spend being written and retried, all attempts together (each attempt is cut
   * off at what is left); past it the batch is spilled. Default DEFAULT_RETRY_BOUND_MS with a spill
   * file. Without one it bounds each attempt instead (default unbounded) and the batch is retried.
   */
  readonly retryBoundMs?: number
  /** Spilled entries the sink refused for their data, moved to the quarantine file `<spill>.rejected`. */
  readonly onRejected?: (count: number, sink: string) => void
  /** Spilled entries written into the sink by a replay (called once per replay that wrote any). */
  readonly onReplayed?: (count: number, sink: string) => void
  /**
   * How long the writer gathers entries before it writes them (default GATHER_MS): one write per
   * interval instead of one per event-loop turn. 0 writes after the turn that recorded them.
   */
  readonly gatherMs?: number
}

/**
 * Each write is a hop to libuv's thread pool (a file) or a round trip (Postgres). Writing after every
 * event-loop turn wrote a few entries per hop under load, and the hops' thread wake-ups and context
 * switches cost more CPU than building the entries did (40–150 µs per write, whatever its size).
 * Gathering for 20 ms writes a loaded gateway's entries in batches of a hundred or more, at most 50
 * writes a second, while an entry still reaches its sink within a few tens of milliseconds. Measured
 * against 5 ms: 1–4 µs less CPU per request at 8k req/s (50 ms saved little more). Requests never wait
 * on it: entries are recorded after the response.
 */
export const GATHER_MS = 20

/** A replay attempted inside close() gives up after this long (the file is then replayed at the next start). */
const CLOSE_REPLAY_MS = 3000

/**
 * With a spill file, a batch is spilled once it has been failing for this long (a hung database
 * would otherwise hold it for maxAttempts × the sink's own timeout while the queue fills).
 */
export const DEFAULT_RETRY_BOUND_MS = 4000

/** While closing, a batch gets one try of at most this long before it is spilled. */
const CLOSE_WRITE_MS = 1000

/**
 * Keeps audit writes off the request path: `record` only queues. One loop per sink writes batches in
 * the order recorded, retrying a failed batch with backoff. Memory is bounded by maxQueueEntries (plus
 * the batch being written).
 *
 * Nothing already accepted is dropped (docs/principles.md: nothing is executed unaudited). A request reserves queue
 * slots for its entries before anything with side effects runs (`reserve`); record() puts reserved
 * entries in the queue whatever its length. A batch the sink will not take is retried with a capped
 * backoff for as long as it takes (or spilled): the queue behind it fills, reservations fail, and new
 * calls get 503 (fail closed on audit) instead of running unaudited. Only entries of requests that
 * hold no reservation (refused before the reservation point: nothing ran) are dropped when the queue
 * is full, and only a shutdown (bounded) gives up on accepted entries.
 *
 * With a spill file, a batch that still fails after maxAttempts, or after retryBoundMs in all, goes
 * to the file (while closing: after one short try), and the writer counts the sink as down: later
 * batches are spilled at once (no retry storm against a dead database, no queue growth) until a
 * replay succeeds. The replay runs off the drain loop every replayIntervalMs, at start when an earlier
 * run left entries behind, and once more at close.
 *
 * What happens to entries is reported only through the on* callbacks (audit/open.ts feeds them into the
 * wardline_audit_* metrics); the writer keeps no counters of its own.
 */
export class AuditWriter {
  private queue: AuditEntry[] = []
  /** Slots promised to requests in flight (reserve) and not yet used or released by record(). */
  private reserved = 0
  private running: Promise<void> | null = null
  private closed = false
  private readonly warn: RateLimitedLog
  private readonly batchSize: number
  private readonly maxAttempts: number
  private readonly retryDelayMs: number
  private readonly replayIntervalMs: number
  private readonly retryBoundMs: number
  /** The sink failed a whole batch and no replay has succeeded since: spill without trying. */
  private sinkDown = false
  private replayTimer: NodeJS.Timeout | null = null
  private replaying: Promise<void> | null = null
  private lastSpillError: unknown = null
  private readonly gatherMs: number
  /** Ends the gathering wait early (a full batch is waiting, or the writer is closing); null when not gathering. */
  private stopGathering: (() => void) | null = null

  constructor(
    readonly sink: AuditSink,
    private readonly log: Logger,
    private readonly options: AuditWriterOptions,
  ) {
    this.warn = new RateLimitedLog(log)
    this.batchSize = options.batchSize ?? 500
    this.maxAttempts = options.maxAttempts ?? 5
    this.retryDelayMs = options.retryDelayMs ?? 100
    this.replayIntervalMs = options.replayIntervalMs ?? 5000
    this.retryBoundMs = options.retryBoundMs ?? (options.spill ? DEFAULT_RETRY_BOUND_MS : Infinity)
    this.gatherMs = options.gatherMs ?? GATHER_MS
    if (options.spill?.hasEntries) {
      log.warn('audit spill file holds entries from an earlier run: replaying', { sink: sink.name, spill_file: options.spill.path })
      this.scheduleReplay(0)
    }
  }

  get pending(): number {
    return this.queue.length
  }

  /** Queue slots held by requests in flight. */
  get reservedEntries(): number {
    return this.reserved
  }

  /**
   * Sets aside `count` queue slots for the entries of a request about to run, or says false (and
   * sets nothing aside) when they would not fit beside what is queued and already reserved. The
   * request hands the count back to record(), which uses or releases every slot.
   */
  reserve(count: number): boolean {
    if (this.queue.length + this.reserved + count > this.options.maxQueueEntries) return false
    this.reserved += count
    return true
  }

  /** Gives back slots reserve() set aside for a request that will not record against them. */
  release(count: number): void {
    this.reserved = Math.max(0, this.reserved - count)
  }

  /** True while entries wait in the spill file. */
  get hasSpilled(): boolean {
    return this.options.spill?.hasEntries ?? false
  }

  /**
   * Queues a finished request's entries. The first `reserved` of them take the slots the request
   * reserved and are queued whatever the queue's length; the slots it did not use are released (a
   * refused request writes 1 entry of the n it reserved). Entries beyond the reservation (none, when
   * the request reserved entryCount) and those of requests that reserved nothing are queued while
   * there is room beside the reservations and otherwise dropped and counted: such requests never
   * reached the upstream.
   */
  record(entries: readonly AuditEntry[], reserved = 0): void {
    const held = Math.min(entries.length, reserved)
    for (let i = 0; i < held; i++) this.queue.push(entries[i])
    if (reserved > 0) this.release(reserved)
    for (let i = held; i < entries.length; i++) {
      const entry = entries[i]
      if (this.queue.length + this.reserved >= this.options.maxQueueEntries) {
        this.options.onDropped?.(1, this.sink.name)
        this.warn.warn(`audit-full:${this.sink.name}`, 'audit queue full: entries dropped', {
          sink: this.sink.name,
          max_queue_entries: this.options.maxQueueEntries,
        })
        continue
      }
      this.queue.push(entry)
    }
    if (this.running === null && this.queue.length > 0) this.running = this.drain()
    else if (this.stopGathering !== null && this.queue.length >= this.batchSize) this.stopGathering()
  }

  /** Resolves once every entry recorded so far has been written, spilled, or given up on. */
  async flush(): Promise<void> {
    while (this.running !== null) await this.running
  }

  /**
   * Replays the spill file into the sink now (waiting for a replay already running). Resolves to
   * whether the file is empty afterwards.
   */
  async replayNow(): Promise<boolean> {
    if (this.replaying === null) {
      const run: Promise<void> = this.replay().finally(() => {
        if (this.replaying === run) this.replaying = null
      })
      this.replaying = run
    }
    await this.replaying
    return !this.hasSpilled
  }

  async close(): Promise<void> {
    this.closed = true
    this.stopGathering?.()
    await this.flush()
    if (this.replayTimer !== null) clearTimeout(this.replayTimer)
    this.replayTimer = null
    if (this.hasSpilled) {
      // One bounded try: if the sink is back the file is emptied now; if not, it stays on disk and
      // the next start replays it. Either way nothing recorded is lost.
      await withDeadline(this.replayNow(), CLOSE_REPLAY_MS, 'replay at close gave up').catch(() => undefined)
      if (this.hasSpilled)
        this.log.warn('audit entries remain in the spill file; they are replayed at the next start', {
          sink: this.sink.name,
          spill_file: this.options.spill?.path,
        })
    }
    await this.sink.close()
  }

  private async drain(): Promise<void> {
    // Let the request that recorded the entry finish first; batch whatever arrives meanwhile.
    await this.gather()
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.length <= this.batchSize ? this.queue : this.queue.slice(0, this.batchSize)
        this.queue = batch === this.queue ? [] : this.queue.slice(this.batchSize)
        await this.writeWithRetry(batch)
        // What arrived during the write is gathered too, so a loaded writer keeps to one write per interval.
        if (this.queue.length > 0) await this.gather()
      }
    } finally {
      this.running = null
    }
  }

  /** Waits gatherMs (GATHER_MS), or less when a full batch is waiting or the writer closes; else one event-loop turn. */
  private gather(): Promise<void> {
    if (this.gatherMs <= 0 || this.closed || this.queue.length >= this.batchSize) {
      return new Promise<void>((resolve) => setImmediate(resolve))
    }
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        this.stopGathering = null
        resolve()
      }
      const timer = setTimeout(done, this.gatherMs)
      this.stopGathering = done
    })
  }

  /**
   * Writes or spills one batch, or holds it until one of them works: its calls were forwarded on the
   * promise that their entries would be kept. Only while closing is a batch dropped (counted, loud).
   */
  private async writeWithRetry(batch: AuditEntry[]): Promise<void> {
    let delay = this.retryDelayMs
    for (;;) {
      if (this.sinkDown && this.options.spill) {
        if (this.spill(batch)) return
      } else {
        const failure = await this.writeWithinBound(batch)
        if (failure === null) return
        if (this.options.spill) {
          this.sinkDown = true
          this.log.warn('audit sink keeps failing: spilling entries to the local file until it is back', {
            sink: this.sink.name,
            spill_file: this.options.spill.path,
            cause: describeError(failure.err),
          })
          if (this.spill(batch)) return
        } else {
          // Without a spill file writeWithinBound gives up only while closing.
          this.drop(batch, 'audit write failed at shutdown: entries dropped', failure.err)
          return
        }
      }
      // Neither the sink nor the spill file took the batch (the disk failed too).
      if (this.closed) {
        this.drop(batch, 'audit spill failed at shutdown: entries dropped', this.lastSpillError)
        return
      }
      // Try the sink again before the spill file next time: it may be back first.
      this.sinkDown = false
      await sleep(delay)
      delay = Math.min(delay * 2, 5000)
    }
  }

  /**
   * Tries the sink with backoff. With a spill file: up to maxAttempts or retryBoundMs (one short try
   * while closing), then the last error. Without one: for as long as it takes, except that once
   * closing, maxAttempts more failures give up. Null when written.
   */
  private async writeWithinBound(batch: AuditEntry[]): Promise<{ err: unknown } | null> {
    const withSpill = this.options.spill !== undefined
    // While closing, what cannot be written promptly is spilled rather than retried.
    const closingWithSpill = (): boolean => this.closed && withSpill
    const giveUpAt = performance.now() + (closingWithSpill() ? Math.min(this.retryBoundMs, CLOSE_WRITE_MS) : this.retryBoundMs)
    let delay = this.retryDelayMs
    let failuresWhileClosing = 0
    for (let attempt = 1; ; attempt++) {
      try {
        // Without a spill file retryBoundMs bounds each attempt, not the batch.
        await this.attempt(batch, withSpill ? giveUpAt - performance.now() : this.retryBoundMs)
        return null
      } catch (err) {
        if (this.closed) failuresWhileClosing++
        const giveUp = withSpill
          ? attempt >= this.maxAttempts || giveUpAt - performance.now() <= delay || closingWithSpill()
          : failuresWhileClosing >= this.maxAttempts
        if (giveUp) return { err }
        this.warn.warn(`audit-retry:${this.sink.name}`, 'audit write failed: retrying', {
          sink: this.sink.name,
          attempt,
          queued: this.queue.length,
          cause: describeError(err),
        })
        await sleep(this.closed ? Math.min(delay, 50) : delay)
        delay = Math.min(delay * 2, 5000)
      }
    }
  }

  private drop(batch: AuditEntry[], message: string, err: unknown): void {
    this.options.onDropped?.(batch.length, this.sink.name)
    this.log.error(message, { sink: this.sink.name, entries: batch.length, cause: describeError(err) })
  }

  /**
   * One write, abandoned after `timeoutMs` (Infinity: as long as the sink takes); the sink is told the
   * bound too, so it can end its own work there. An abandoned write may still land: sinks tolerate
   * seeing an entry twice (see AuditSink).
   */
  private attempt(batch: AuditEntry[], timeoutMs: number): Promise<void> {
    if (!Number.isFinite(timeoutMs)) return this.sink.write(batch)
    const ms = Math.max(1, Math.round(timeoutMs))
    return withDeadline(this.sink.write(batch, { timeoutMs: ms }), ms, `no answer from the ${this.sink.name} audit sink within ${ms} ms`)
  }

  /**
   * Appends the batch to the spill file; false when the disk failed too. The caller then keeps the
   * batch and tries again (sink first) rather than dropping it; the failure is logged at most once a
   * minute, loudly, since the queue behind it is filling and calls are about to get 503.
   */
  private spill(batch: AuditEntry[]): boolean {
    const spill = this.options.spill as AuditSpill
    try {
      spill.append(batch)
    } catch (err) {
      this.lastSpillError = err
      this.warn.warn(
        `audit-spill-failed:${this.sink.name}`,
        'audit spill failed: holding the entries and retrying; new calls get 503 once the queue is full',
        { sink: this.sink.name, spill_file: spill.path, entries: batch.length, cause: describeError(err) },
      )
      return false
    }
    this.options.onSpilled?.(batch.length, this.sink.name)
    this.scheduleReplay(this.replayIntervalMs)
    return true
  }

  private scheduleReplay(delayMs: number): void {
    if (this.replayTimer !== null || this.closed) return
    this.replayTimer = setTimeout(() => {
      this.replayTimer = null
      void this.replayNow().then((empty) => {
        if (!empty) this.scheduleReplay(this.replayIntervalMs)
      })
    }, delayMs)
    // A pending replay must not keep a finished process alive; close() replays once more anyway.
    this.replayTimer.unref()
  }

  private async replay(): Promise<void> {
    const spill = this.options.spill
    try {
      if (spill === undefined) return
      // Each replayed batch is bounded like a live one (shorter while closing), so a hung sink cannot
      // hold the replay, or the shutdown waiting on it, for long.
      const timeoutMs = this.closed ? Math.min(this.retryBoundMs, CLOSE_REPLAY_MS) : this.retryBoundMs
      const count = await spill.replay((batch) => this.attempt(batch, timeoutMs), this.batchSize, {
        isRejection: (err) => this.sink.rejects?.(err) ?? false,
        onRejected: (_line, why) => {
          this.options.onRejected?.(1, this.sink.name)
          this.warn.warn(
            `audit-spill-rejected:${this.sink.name}`,
            'audit spill file: moved a line the sink cannot take to the quarantine file',
            { sink: this.sink.name, rejected_file: spill.rejectedPath, why },
          )
        },
      })
      this.sinkDown = false
      if (count > 0) {
        this.options.onReplayed?.(count, this.sink.name)
        this.log.info('audit spill replayed into the sink', { sink: this.sink.name, entries: count })
      }
    } catch (err) {
      this.sinkDown = true
      this.warn.warn(`audit-replay:${this.sink.name}`, 'audit spill replay failed: will retry', {
        sink: this.sink.name,
        cause: describeError(err),
      })
    }
  }
}
