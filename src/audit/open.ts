import type { Config } from '../config/types'
import type { Closer, Contribution } from '../feature'
import type { Logger } from '../log'
import type { AuditMetrics } from './metrics'
import type { Stage } from '../pipeline/stage'
import type { ReadinessCheck } from '../readiness'
import type { PostgresFeature } from '../postgres/open'
import { postgresReadiness } from '../postgres/readiness'
import { JsonlAuditSink } from './jsonl-sink'
import { PostgresAuditSink } from './postgres-sink'
import { auditReservationStage } from './reservation-stage'
import { auditRetention } from './retention'
import { AuditSpill } from './spill'
import { AuditTrail } from './trail'
import { AuditWriter } from './writer'

/**
 * The audit trail and its reservation stage. The trail is not among the closers: Lifecycle flushes and
 * closes it itself, after the requests have drained and before anything it writes into is released.
 */
export interface AuditFeature extends Contribution {
  readonly trail: AuditTrail
  /** The stage that reserves room in every audit queue before a call goes further. */
  readonly reservation: Stage
}

/**
 * The spill file of the Postgres sink, opened before anything else (no pool, no listener): a path that
 * cannot be written stops startup with nothing to release. Null without Postgres storage.
 */
export function openAuditSpill(config: Config, postgresOn: boolean): AuditSpill | null {
  return postgresOn ? AuditSpill.open(config.audit.spillFile) : null
}

/**
 * Every configured audit sink, each behind its writer (queue, retries; spill for Postgres), and with
 * Postgres storage and audit.retention_days the deletion of old rows.
 */
export async function openAudit(
  config: Config,
  postgres: PostgresFeature | null,
  spill: AuditSpill | null,
  metrics: AuditMetrics,
  log: Logger,
): Promise<AuditFeature> {
  const writers: AuditWriter[] = []
  const readiness: ReadinessCheck[] = []
  const closers: Closer[] = []
  const queueing = {
    maxQueueEntries: config.audit.maxQueueEntries,
    onDropped: (n: number, name: string) => metrics.auditDropped.labels(name).inc(n),
  }
  if (config.audit.output !== null) {
    writers.push(new AuditWriter(await JsonlAuditSink.open(config.audit.output), log, queueing))
  }
  if (postgres !== null && spill !== null) {
    const { pool, bringUp } = postgres
    const pgWriter = new AuditWriter(new PostgresAuditSink(pool), log, {
      ...queueing,
      spill,
      onSpilled: (n, name) => metrics.auditSpilled.labels(name).inc(n),
      onRejected: (n, name) => metrics.auditRejected.labels(name).inc(n),
      onReplayed: (n, name) => metrics.auditReplayed.labels(name).inc(n),
    })
    writers.push(pgWriter)
    readiness.push(postgresReadiness(pool, { auditSpillPending: () => pgWriter.hasSpilled, notReady: () => bringUp.cause }))
    metrics.observeAuditSpill(pgWriter.sink.name, [spill.path, spill.replayingPath])
    // Entries spilled while the database was unreachable, or had no audit_entries table yet (a start
    // during an outage), go in once it is brought up rather than at the writer's next replay tick.
    bringUp.add({
      name: 'audit replay',
      run: () => {
        if (pgWriter.hasSpilled) void pgWriter.replayNow()
      },
    })
    if (config.audit.retentionDays !== null) closers.push(openRetention(config.audit.retentionDays, postgres, metrics, log))
  }
  for (const w of writers) metrics.auditQueueLimit.labels(w.sink.name).set(config.audit.maxQueueEntries)
  const trail = new AuditTrail(writers, metrics, log)
  return {
    trail,
    reservation: auditReservationStage(trail),
    readiness,
    closers,
    // SIGHUP: file sinks reopen their paths (log rotation).
    onReload: () => trail.reopen(),
  }
}

/**
 * audit.retention_days: one replica at a time deletes old audit_entries rows in batches. Started by
 * a bring-up step (after the migrations: the table must exist); returns its closer, which stops it
 * before the pool ends.
 */
function openRetention(days: number, postgres: PostgresFeature, metrics: AuditMetrics, log: Logger): Closer {
  const retention = auditRetention(postgres.pool, log, days, {
    onDeleted: (rows) => {
      metrics.auditRetentionDeleted.inc(rows)
      log.info('audit retention deleted old audit entries', { rows, retention_days: days })
    },
  })
  postgres.bringUp.add({ name: 'audit retention', run: () => retention.start() })
  return () => retention.close()
}
