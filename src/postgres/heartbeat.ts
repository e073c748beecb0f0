import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import type { Pool, QueryConfig } from 'pg'
import { withDeadline } from '../deadline'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'

/** How often a replica says it is alive; one that missed MISSED_BEATS in a row no longer counts. */
export const HEARTBEAT_INTERVAL_MS = 5000
const MISSED_BEATS = 3

/** Rows of replicas gone this long are deleted by whichever replica beats next. */
const FORGET_AFTER_SECONDS = 3600

/** Bound on one beat (and on the goodbye at close): a hung database must not pile up beats. */
const BEAT_TIMEOUT_MS = 2000

/**
 * One statement: this replica's row is written with the database clock, and the replicas whose last
 * beat is recent are counted (the CTE's own write is not visible to the count, hence the + 1). Rows of
 * replicas gone for an hour are deleted on the way, so the table holds only recent replicas.
 */
const BEAT_SQL = `WITH me AS (
  INSERT INTO wardline_replicas (replica_id, heartbeat_at) VALUES ($1, clock_timestamp())
  ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at
  RETURNING 1
), gone AS (
  DELETE FROM wardline_replicas WHERE replica_id <> $1 AND heartbeat_at < clock_timestamp() - make_interval(secs => $3::double precision)
)
SELECT 1 + count(*)::integer AS live
  FROM wardline_replicas
 WHERE replica_id <> $1 AND heartbeat_at > clock_timestamp() - make_interval(secs => $2::double precision)`

export interface HeartbeatOptions {
  readonly intervalMs?: number
  /** Unique per process; the default names the host and pid for whoever reads the table. */
  readonly replicaId?: string
  readonly log?: Logger
}

/**
 * This replica's heartbeat in wardline_replicas (migration 004), and how many replicas the database
 * last reported alive: a replica that enforces limits on its own while the store fails
 * (budget.on_store_error: local) takes limit ÷ that many. A beat that fails keeps the last count: the
 * replicas are still there, only the database is not.
 */
export class ReplicaHeartbeat {
  readonly replicaId: string
  private readonly intervalMs: number
  private readonly warn: RateLimitedLog | null
  private live = 1
  private timer: NodeJS.Timeout | null = null
  private beating: Promise<void> | null = null
  private closed = false
  /** Beats left during which the count may not fall: set by a failed beat (the database was away). */
  private recovering = 0
  /** A beat has reached the database: there is a row to remove at close. */
  private registered = false

  constructor(
    private readonly pool: Pool,
    options: HeartbeatOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? HEARTBEAT_INTERVAL_MS
    this.replicaId = options.replicaId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`
    this.warn = options.log ? new RateLimitedLog(options.log) : null
  }

  /** Replicas alive as the database last said, this one included: at least 1. */
  liveReplicas(): number {
    return this.live
  }

  /** Beats once now (resolves when that beat is done, failed or not), then every interval. */
  async start(): Promise<void> {
    if (this.closed || this.timer !== null) return
    this.timer = setInterval(() => void this.beat(), this.intervalMs)
    this.timer.unref()
    await this.beat()
  }

  /** One beat; a beat still running is not doubled. Never rejects. */
  beat(): Promise<void> {
    if (this.beating !== null) return this.beating
    const window = (MISSED_BEATS * this.intervalMs) / 1000
    const query = { text: BEAT_SQL, values: [this.replicaId, window, FORGET_AFTER_SECONDS], query_timeout: BEAT_TIMEOUT_MS }
    this.beating = this.pool
      .query<{ live: number }>(query as QueryConfig)
      .then(
        (r) => {
          const counted = Math.max(1, r.rows[0].live)
          // Right after an outage every replica's last beat is old, not only the ones that are gone: the
          // count may only fall once the others have had MISSED_BEATS intervals to beat again.
          if (this.recovering > 0) {
            this.recovering--
            this.live = Math.max(this.live, counted)
          } else {
            this.live = counted
          }
          this.registered = true
        },
        (err: unknown) => {
          this.recovering = MISSED_BEATS
          this.warn?.warn('replica-heartbeat', 'replica heartbeat failed: keeping the last replica count', {
            cause: describeError(err),
            live_replicas: this.live,
          })
        },
      )
      .finally(() => {
        this.beating = null
      })
    return this.beating
  }

  /** Stops beating and removes this replica's row, so the others count one fewer at their next beat. */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    await this.beating
    if (!this.registered) return
    const goodbye = {
      text: 'DELETE FROM wardline_replicas WHERE replica_id = $1',
      values: [this.replicaId],
      query_timeout: BEAT_TIMEOUT_MS,
    }
    // Bounded as a whole (the pool wait too): a replica that cannot say goodbye stops counting after 3 intervals.
    await withDeadline(this.pool.query(goodbye as QueryConfig), BEAT_TIMEOUT_MS, 'no answer').catch(() => undefined)
  }
}
