import type { Pool } from 'pg'
import type { Logger } from '../log'
import { BatchReaper, type BatchReaperOptions } from '../postgres/reaper'

/** Advisory lock key of audit retention ('wlar' as bytes): its own, so it never skips a budget reaper run or waits on one. */
export const RETENTION_LOCK = 0x776c6172

export interface AuditRetentionOptions extends BatchReaperOptions {
  /** "Now" for the cutoff: absent (production), the database clock; a test injects one instead of sleeping. */
  readonly clock?: () => Date
}

/**
 * Defaults sized for a busy gateway: 5000 rows a statement (tens of ms on the "timestamp" index, a
 * short transaction), 20 statements a run (100 000 rows), a run every 10 minutes, and a run 5 s later
 * while a backlog is left, so switching retention on over a year of rows deletes it in steps that
 * never hold a connection of the shared pool for long (at most maxBatches statements back to back).
 * The first run comes 30 s after start, not a whole interval: replicas redeployed more often than
 * every 10 minutes must still delete.
 */
const DEFAULTS = { batchSize: 5000, maxBatches: 20, intervalMs: 10 * 60_000, backlogDelayMs: 5000, firstRunDelayMs: 30_000 }

/**
 * audit.retention_days: deletes audit_entries rows whose "timestamp" (the replica's clock) and
 * recorded_at (the database's, at insert) are both older than now − days, off
 * the request path, in bounded batches, on one replica at a time (see BatchReaper). The cutoff is
 * read on the database clock, as budget windows are: replicas with skewed clocks agree.
 */
export function auditRetention(pool: Pool, log: Logger, retentionDays: number, options: AuditRetentionOptions = {}): BatchReaper {
  if (!Number.isInteger(retentionDays) || retentionDays < 1)
    throw new RangeError(`retention days must be an integer ≥ 1, not ${retentionDays}`)
  const clock = options.clock
  const now = clock ? '$3::timestamptz' : 'clock_timestamp()'
  return new BatchReaper(
    pool,
    log,
    {
      name: 'audit retention',
      lockKey: RETENTION_LOCK,
      // By id through the "timestamp" index: the inner scan stops after $1 old rows. Hours, not days:
      // timestamptz − N days is calendar arithmetic in the session's TimeZone, 23 h for a spring-forward
      // day, and would delete rows an hour younger than retention_days × 24 h.
      // recorded_at too (the database's clock at insert): "timestamp" is the replica's clock, and a
      // replica whose clock is retention_days behind would otherwise have calls of minutes ago deleted.
      sql: `DELETE FROM audit_entries WHERE id IN (
        SELECT id FROM audit_entries
         WHERE "timestamp" < ${now} - make_interval(hours => 24 * $2::integer)
           AND recorded_at < ${now} - make_interval(hours => 24 * $2::integer)
         LIMIT $1)`,
      params: clock ? () => [retentionDays, clock()] : () => [retentionDays],
    },
    { ...DEFAULTS, ...options },
  )
}
