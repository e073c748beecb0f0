import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'
import type { AuditEntry } from './entry'
import type { AuditSink } from './sink'

export interface AuditWriterOptions {
  /** Entries held in memory before new ones are dropped and counted. */
  readonly maxQueueEntries: number
  /** Entries handed to the sink at once. */
  readonly batchSize?: number
  /** Attempts per batch before it is given up on (logged and counted). */
  readonly maxAttempts?: number
  /** First retry delay; doubles per attempt up to 5 s. */
  readonly retryDelayMs?: number
  readonly onDropped?: (count: number, sink: string) => void
}

/**
 * Keeps audit writes off the request path: `record` only queues. One loop per sink writes batches in
 * the order recorded, retrying a failed batch with backoff. Memory is bounded by maxQueueEntries.
 */
export class AuditWriter {
  private queue: AuditEntry[] = []
  private running: Promise<void> | null = null
  private closed = false
  private readonly warn: RateLimitedLog
  private readonly batchSize: number
  private readonly maxAttempts: number
  private readonly retryDelayMs: number
  dropped = 0

  constructor(readonly sink: AuditSink, private readonly log: Logger, private readonly options: AuditWriterOptions) {
    this.warn = new RateLimitedLog(log)
    this.batchSize = options.batchSize ?? 500
    this.maxAttempts = options.maxAttempts ?? 5
    this.retryDelayMs = options.retryDelayMs ?? 100
  }

  get pending(): number {
    return this.queue.length
  }

  record(entries: readonly AuditEntry[]): void {
    for (const entry of entries) {
      if (this.queue.length >= this.options.maxQueueEntries) {
        this.dropped++
        this.options.onDropped?.(1, this.sink.name)
        this.warn.warn(`audit-full:${this.sink.name}`, 'audit queue full: entries dropped', { sink: this.sink.name, max_queue_entries: this.options.maxQueueEntries })
        continue
      }
      this.queue.push(entry)
    }
    if (this.running === null && this.queue.length > 0) this.running = this.drain()
  }

  /** Resolves once every entry recorded so far has been written (or given up on). */
  async flush(): Promise<void> {
    while (this.running !== null) await this.running
  }

  async close(): Promise<void> {
    this.closed = true
    await this.flush()
    await this.sink.close()
  }

  private async drain(): Promise<void> {
    // Let the request that recorded the entry finish first; batch whatever arrives meanwhile.
    await new Promise<void>((resolve) => setImmediate(resolve))
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.length <= this.batchSize ? this.queue : this.queue.slice(0, this.batchSize)
        this.queue = batch === this.queue ? [] : this.queue.slice(this.batchSize)
        await this.writeWithRetry(batch)
      }
    } finally {
      this.running = null
    }
  }

  private async writeWithRetry(batch: AuditEntry[]): Promise<void> {
    let delay = this.retryDelayMs
    for (let attempt = 1; ; attempt++) {
      try {
        await this.sink.write(batch)
        return
      } catch (err) {
        if (attempt >= this.maxAttempts) {
          this.dropped += batch.length
          this.options.onDropped?.(batch.length, this.sink.name)
          this.log.error('audit write failed: entries dropped', { sink: this.sink.name, entries: batch.length, cause: describeError(err) })
          return
        }
        this.warn.warn(`audit-retry:${this.sink.name}`, 'audit write failed: retrying', { sink: this.sink.name, attempt, cause: describeError(err) })
        await new Promise((resolve) => setTimeout(resolve, this.closed ? Math.min(delay, 50) : delay))
        delay = Math.min(delay * 2, 5000)
      }
    }
  }
}
