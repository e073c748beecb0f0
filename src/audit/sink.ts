import type { AuditEntry } from './entry'

/**
 * Where audit entries end up. `write` receives entries in the order they were recorded and resolves
 * once they are durable as far as the sink can tell (written to the file descriptor, committed);
 * it rejects if none of the batch may be assumed written, and the writer then retries the whole
 * batch, so a sink must tolerate seeing an entry twice (the Postgres sink dedupes on request_id).
 * `close` releases what the sink holds, after the last `write` settled.
 */
export interface AuditSink {
  readonly name: string
  write(entries: readonly AuditEntry[], options?: AuditWriteOptions): Promise<void>
  /**
   * True when `err` (from a write) means the entries can never be written (the sink refuses their
   * data), not that the sink is unavailable. A spill replay quarantines such entries instead of
   * retrying them forever. Sinks without it never reject.
   */
  rejects?(err: unknown): boolean
  /** Asks a file sink to reopen its path before its next write (log rotation by rename). */
  reopen?(): void
  close(): Promise<void>
}

export interface AuditWriteOptions {
  /** Give up on this write after about this long (the writer retries or spills it). */
  readonly timeoutMs?: number
}
