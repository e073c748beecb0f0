import type { Pool, PoolClient, QueryConfig, QueryResult } from 'pg'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'
import { withDeadline } from '../deadline'
import { ReplicaHeartbeat } from '../postgres/heartbeat'
import type { AdmitResult, BucketCharge, BucketReading, BucketSelection, BucketState, BudgetStore, LocalHandOver, WindowId } from './store'

export interface PostgresBudgetStoreOptions {
  /**
   * Bound on one check, start to verdict (budget.check_timeout_seconds): pool wait, connect, lock
   * wait, network. Past it `admit` rejects, and the database is told the same bound so the check is
   * not applied after we gave up on it.
   */
  readonly checkTimeoutMs: number
  /**
   * Commit budget checks with synchronous_commit=on. Off by default: a crash of the database can then
   * lose the last fraction of a second of counts (never the table, never a torn row), and in exchange
   * a hot key's row lock is held through an in-memory commit instead of a WAL flush. Measured in
   * docs/postgres.md.
   */
  readonly synchronousCommit?: boolean
  /**
   * The clock windows are judged on. Absent (production): the database clock, clock_timestamp() in the
   * SQL text, so every replica sharing the database agrees on when a window ends. A test injects a
   * clock it moves forward instead of sleeping; its reading travels with each check as a parameter.
   * Either way the time a check then waits for its row locks is added on the database clock
   * (migrations/002-window-clock.ts to 004-coalesced-admission.ts), and deadlines stay on the real database clock.
   */
  readonly clock?: () => Date
  /** Called once per admitted check that was refunded because its verdict arrived after we gave up on it. */
  readonly onRefunded?: () => void
  /**
   * Most statements in flight at once (each carries every check waiting when it starts). Only one runs
   * until it has been in flight STALLED_AFTER_MS; default half the pool, 1 to 4.
   */
  readonly maxStatements?: number
  /** This replica's heartbeat interval (postgres/heartbeat.ts); tests shorten it. */
  readonly heartbeatIntervalMs?: number
  readonly log?: Logger
}

/**
 * Our deadline is this much shorter than check_timeout_seconds, so the store's own verdict (a result,
 * or "no verdict in time" plus a refund of a late result) always comes before the budget stage's
 * overall deadline on the same bound.
 */
const CALLER_MARGIN_MS = 10

/**
 * Time kept back from the database's bound: covers the error of the clock-offset estimate (half the
 * best recent round trip) and lets the verdict travel back before our deadline.
 */
const SERVER_MARGIN_MS = 20

/** How long a verdict is still awaited after we gave up on it (to refund it), before the connection is dropped. */
const LATE_RESULT_GRACE_MS = 2000

/** A clock-offset sample is replaced by a better one (shorter round trip), or by any one once this old. */
const OFFSET_SAMPLE_MAX_AGE_MS = 30_000

/**
 * The one statement of a batch of checks, which also carries the units this replica admitted locally
 * during an outage, if any (migrations/007-handover-in-admission.ts); `clock` is the window clock's
 * SQL: clock_timestamp(), or a test's parameter.
 */
function admitSql(clock: string): string {
  return `SELECT refused_by, used, key_ends, key_reset, db_epoch_ms
  FROM wardline_budget_admit_batch($1::text[], $2::integer[], $3::integer[], $4::integer[], $5::double precision[], $6::integer[],
                                   $7::boolean[], $8::double precision[], $9::integer[], $10::boolean,
                                   $11::integer[], $12::double precision[], ${clock})`
}

/**
 * Buckets whose local units a statement carries beyond those of its own checks (LocalHandOver.take):
 * the rest of an outage's hand-over drains a thousand buckets per statement, each a row lock in key
 * order, so a replica that admitted calls of 100,000 identities locally does not make one statement
 * lock them all within one check's bound. A check's own buckets always travel whole.
 */
const MAX_HANDED_EXTRA = 1000

/**
 * While local units wait after a failed statement, how often an idle store sends a statement of its
 * own to carry them: a replica that gets no call once the database is back must not keep them from
 * the shared rows the other replicas judge on until its next call.
 */
const DRAIN_INTERVAL_MS = 1000

/**
 * What such a statement checks: one bucket of its own, never charged (cost 0, charged false). Its key
 * is no JSON array, so no bucket of keys.ts can be it; its row is an expired placeholder the reaper removes.
 */
const HANDOVER_PROBE: readonly BucketCharge[] = [
  { key: 'wardline:hand-over', kind: 'identity', name: '', limit: 2147483647, windowSeconds: 1, cost: 0, charged: false },
]

/**
 * The admin API's read of buckets (BudgetStore.inspect), on the window clock `clock` (SQL): each named
 * key (a row whose window ended, or none, reads as 0 used), then the open rows under a prefix. A prefix
 * is matched with starts_with over the open rows (a scan: the key index is not in "C" collation, so a
 * range on it would not follow the prefix); only asked for when budget.repeat_limit is set.
 */
function inspectSql(clock: string, prefixed: boolean): string {
  const named = `SELECT k.key, CASE WHEN b.ends_at > n.t THEN b.count ELSE 0 END AS used,
       CASE WHEN b.ends_at > n.t THEN extract(epoch FROM b.ends_at - n.t)::double precision END AS reset_seconds, true AS named
  FROM (SELECT ${clock} AS t) n CROSS JOIN unnest($1::text[]) AS k(key)
  LEFT JOIN budget_buckets b ON b.key = k.key`
  if (!prefixed) return named
  return `${named}
UNION ALL
SELECT b.key, b.count, extract(epoch FROM b.ends_at - n.t)::double precision, false
  FROM (SELECT ${clock} AS t) n CROSS JOIN budget_buckets b
 WHERE b.ends_at > n.t AND EXISTS (SELECT 1 FROM unnest($2::text[]) AS p(prefix) WHERE starts_with(b.key, p.prefix))`
}

/**
 * The admin API's reset (BudgetStore.reset): deletes the selected rows, for every replica at once, and
 * returns what each had used on the window clock. The rows are locked first in key order (as
 * wardline_budget_admit locks them), so a reset and a check sharing rows queue instead of deadlocking.
 * A check after it finds no row and opens a fresh window; a refund of a check charged before it finds
 * no row with that window and takes nothing back.
 */
function resetSql(clock: string, prefixed: boolean): string {
  const prefix = prefixed ? ' OR EXISTS (SELECT 1 FROM unnest($2::text[]) AS p(prefix) WHERE starts_with(b.key, p.prefix))' : ''
  return `WITH held AS MATERIALIZED (
  SELECT b.key, CASE WHEN b.ends_at > n.t THEN b.count ELSE 0 END AS used,
         CASE WHEN b.ends_at > n.t THEN extract(epoch FROM b.ends_at - n.t)::double precision END AS reset_seconds
    FROM budget_buckets b CROSS JOIN (SELECT ${clock} AS t) n
   WHERE b.key = ANY($1::text[])${prefix}
   ORDER BY b.key COLLATE "C"
     FOR UPDATE OF b)
DELETE FROM budget_buckets b USING held WHERE b.key = held.key
RETURNING held.key, held.used, held.reset_seconds`
}

/** Bound on an admin read or reset when the caller gives none. */
const ADMIN_QUERY_TIMEOUT_MS = 5000

/** The most checks one statement carries; more wait for the next one. */
const MAX_BATCH_CHECKS = 500

/**
 * Takes back an admitted check's charged buckets, in the window each was charged to only: an admitted
 * check nobody waited for, or one the caller refunds (`refund`). The rows are
 * locked first, in the order wardline_budget_admit locks them (key, COLLATE "C"), so a refund and a
 * check sharing buckets queue behind each other instead of deadlocking (the charges arrive in tier
 * order, tool → tenant → identity, which is not key order). ORDER BY runs before FOR UPDATE, and the
 * UPDATE only touches rows the CTE already holds. Still one statement, one round trip. Exported for
 * tests.
 */
export const REFUND_SQL = `WITH held AS MATERIALIZED (
  SELECT b.key, r.cost
    FROM budget_buckets b
    JOIN unnest($1::text[], $2::integer[], $3::timestamptz[]) AS r(key, cost, ends_at)
      ON b.key = r.key AND b.ends_at = r.ends_at
   ORDER BY b.key COLLATE "C"
     FOR UPDATE OF b)
UPDATE budget_buckets b SET count = greatest(0, b.count - held.cost)
  FROM held
 WHERE b.key = held.key`

interface AdmitRow {
  /** Per check: -1 admitted, -2 no verdict (its deadline passed on the database), else the refusing charge. */
  refused_by: number[]
  /** Per charge, every check's charges one after the other, as sent: the count after it, or -1 with no open window. */
  used: number[]
  /** Per distinct key, as sent: its window's end (the window id a refund names), null with none open. */
  key_ends: Array<string | null>
  /** Per distinct key: seconds left in its window, null with none open. */
  key_reset: Array<number | null>
  db_epoch_ms: number
}

/** A batch statement, and each charge's key position in it (0-based), to read the row back. */
interface BatchStatement {
  readonly query: QueryConfig
  readonly slots: readonly number[]
  /** Where the local units it carries come from (LocalHandOver.take): they land or fail with it. Null: none. */
  readonly carries: LocalHandOver | null
}

/** A statement on its way: the checks it carries, and its answer to come. */
interface SentBatch {
  readonly live: readonly PendingCheck[]
  readonly statement: BatchStatement
  readonly sentAt: number
  /** LocalHandOver.localAdmissions when it was sent: a verdict is exact only if none was admitted locally since. */
  readonly localAdmissions: number
  readonly query: Promise<QueryResult<AdmitRow>>
}

/**
 * REFUND_SQL's parameters for what an admitted check charged: its charged buckets that have a window
 * (an admitted charged bucket always has one; the check is skipped for a null defensively). `windows[i]`
 * is the bucket's ends_at as the database wrote it (key_ends). Null when there is nothing to take back.
 */
function refundValues(charges: readonly BucketCharge[], windows: readonly WindowId[]): [string[], number[], string[]] | null {
  const keys: string[] = []
  const costs: number[] = []
  const ends: string[] = []
  for (let i = 0; i < charges.length; i++) {
    const c = charges[i]
    const window = windows[i]
    if (!c.charged || window === null || window === undefined) continue
    keys.push(c.key)
    costs.push(c.cost)
    ends.push(String(window))
  }
  return keys.length === 0 ? null : [keys, costs, ends]
}

/** Epoch milliseconds on a monotonic clock: an NTP step on this host does not move it. */
function localEpochMs(): number {
  return performance.timeOrigin + performance.now()
}

/** Where a check is: waiting for a statement, carried by one, or given up on by its caller in either. */
const QUEUED = 0
const SENT = 1
const ABANDONED = 2
const ABANDONED_SENT = 3
const DONE = 4

/** One check waiting for, or carried by, a batch statement. */
class PendingCheck {
  state = QUEUED
  /** performance.now() past which the caller no longer waits. */
  readonly deadline: number
  resolve!: (result: AdmitResult) => void
  reject!: (err: Error) => void
  readonly verdict: Promise<AdmitResult>

  constructor(
    readonly charges: readonly BucketCharge[],
    boundMs: number,
  ) {
    this.deadline = performance.now() + boundMs
    this.verdict = new Promise<AdmitResult>((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
  }

  fail(err: Error): void {
    if (this.state === QUEUED || this.state === SENT) this.reject(err)
    this.state = DONE
  }
}

/** What the store has sent, for the round trips per check figure (npm run bench, docs/postgres.md). */
export interface PostgresBudgetStats {
  /** Checks asked of the store (an empty one is not). */
  readonly checks: number
  /** Admission statements sent to the database: one round trip each, carrying one or more checks. */
  readonly statements: number
}

const EMPTY_RESULT: AdmitResult = { admitted: true, buckets: [], refusedBy: -1 }

/**
 * Budget buckets in the shared budget_buckets table: every replica on one database enforces the same
 * limits (docs/budget.md; docs/principles.md: at most one Postgres round trip per budget check). Checks are **coalesced**: a check that arrives
 * while the store's statements are in flight waits for the next one, which carries every check that
 * waited (group-commit style) in ONE call to wardline_budget_admit_batch
 * (postgres/migrations/004-coalesced-admission.ts): one round trip, one commit, each row locked once,
 * whatever number of checks and tiers, and each check judged alone, all or nothing, in arrival order.
 * Windows are on the database clock, rows locked in key order (deadlock-free). A bucket's window is its
 * row's ends_at, as text (key_ends). At most `maxStatements` statements are in flight, so a spike
 * of checks needs that many connections, not one each.
 *
 * No ghost increments, because a check that hangs must become "failed open", never a late charge:
 *  - our deadline covers the wait for a statement, the pool wait and the query;
 *  - it travels with the statement, translated to the database clock (the offset is measured on every
 *    statement, keeping the sample with the shortest round trip). The database gives a check that
 *    arrives after it, or would be written after it, no verdict and charges nothing for it, and ends
 *    lock waits at the latest deadline of the statement;
 *  - a verdict that was committed in time but reached us after we gave up (an event loop busy past
 *    the deadline) is refunded at once, in the window it was charged to.
 */
export class PostgresBudgetStore implements BudgetStore {
  private readonly checkTimeoutMs: number
  private readonly synchronousCommit: boolean
  private readonly warn: RateLimitedLog | null
  private readonly log: Logger | null
  /** The injected window clock, or null for the database clock (production). */
  private readonly clock: (() => Date) | null
  /** Name and text of the prepared admit statement, fixed by the clock at construction. */
  private readonly admitName: string
  private readonly admitSql: string
  private readonly onRefunded: (() => void) | null
  private readonly maxStatements: number
  private readonly heartbeat: ReplicaHeartbeat
  /** Database clock minus local clock (ms), from the sample with the shortest round trip; null until measured. */
  private dbOffsetMs: number | null = null
  private offsetRttMs = Infinity
  private offsetSampledAt = 0
  /** Checks waiting for the next statement, in arrival order. */
  private queue: PendingCheck[] = []
  /** Checks abandoned while queued since the queue was last emptied or compacted. */
  private abandonedQueued = 0
  private inFlight = 0
  /** When each statement in flight started (performance.now()): at most maxStatements entries. */
  private readonly startedAt: number[] = []
  private stallTimer: NodeJS.Timeout | null = null
  /** The checks of each statement in flight, for the keys a stalled one holds or waits for. */
  private readonly sent = new Set<readonly PendingCheck[]>()
  private checks = 0
  private statements = 0
  /** Statements in flight, abandoned verdicts and refunds still running: close() waits for them. */
  private readonly lateWork = new Set<Promise<void>>()
  /** The local limiter's units waiting for the store (on_store_error: local), once a check has named it. */
  private handOver: LocalHandOver | null = null
  /** A statement carrying local units is in flight: no other statement starts until it ends. */
  private carrying = false
  /** Sends a statement of its own while local units wait and no check comes (drain). */
  private drainTimer: NodeJS.Timeout | null = null
  private closed = false

  constructor(
    private readonly pool: Pool,
    options: PostgresBudgetStoreOptions,
  ) {
    this.checkTimeoutMs = options.checkTimeoutMs
    this.synchronousCommit = options.synchronousCommit ?? false
    this.warn = options.log ? new RateLimitedLog(options.log) : null
    this.log = options.log ?? null
    this.clock = options.clock ?? null
    // Two texts, two names: pg refuses to prepare one name for two texts on the same connection, and
    // a test may run a store on each clock over one pool.
    this.admitName = this.clock === null ? 'wardline_budget_admit_batch_v7' : 'wardline_budget_admit_batch_v7_injected_clock'
    this.admitSql = admitSql(this.clock === null ? 'clock_timestamp()' : '$13::timestamptz')
    this.onRefunded = options.onRefunded ?? null
    this.maxStatements = Math.max(1, options.maxStatements ?? defaultMaxStatements(pool))
    this.heartbeat = new ReplicaHeartbeat(pool, { intervalMs: options.heartbeatIntervalMs, log: options.log })
  }

  admit(charges: readonly BucketCharge[], timeoutMs = this.checkTimeoutMs, handOver?: LocalHandOver): Promise<AdmitResult> {
    // One limiter per process (budget/open.ts): the first check that names it is enough.
    if (handOver !== undefined) this.handOver = handOver
    if (charges.length === 0) return Promise.resolve(EMPTY_RESULT)
    const bound = Math.max(1, timeoutMs - CALLER_MARGIN_MS)
    const check = new PendingCheck(charges, bound)
    this.checks++
    this.queue.push(check)
    this.pump()
    return withDeadline(check.verdict, bound, `no budget verdict within ${bound} ms`).catch((err: Error) => {
      if (check.state === QUEUED) {
        // Never sent: nothing can be charged. The next statement skips it; a long outage (statements
        // hanging until their timeout) must not let given-up checks pile up in the queue meanwhile.
        check.state = ABANDONED
        if (++this.abandonedQueued > 1000 && this.abandonedQueued * 2 > this.queue.length) this.compactQueue()
        throw new Error(`${err.message}: still waiting for a database connection (postgres.max_connections)`)
      }
      // Sent: an admitted verdict that still arrives is refunded (deliver).
      if (check.state === SENT) check.state = ABANDONED_SENT
      throw err
    })
  }

  /**
   * Takes back what an admitted check charged, in the windows `result` names (key_ends), so a bucket
   * whose window ended since keeps its new window's count: one statement (REFUND_SQL), bounded by
   * `timeoutMs` from the pool wait to the answer. Rejects on a store failure, unlogged: the caller
   * logs and counts it. A refund we gave up on (a hung network) may still reach the database later and
   * apply there: it then takes back what the caller already counted as not taken back, never more.
   * close() waits for refunds still running.
   */
  refund(charges: readonly BucketCharge[], result: AdmitResult, timeoutMs = this.checkTimeoutMs): Promise<void> {
    if (!result.admitted) return Promise.resolve()
    const values = refundValues(
      charges,
      result.buckets.map((b) => b.window),
    )
    if (values === null) return Promise.resolve()
    const work = this.boundedStatement(REFUND_SQL, values, timeoutMs, 'refund')
    this.track(work.catch(() => undefined))
    return work
  }

  /** The shared counts of the selected buckets (inspectSql), one statement bounded by `timeoutMs`. */
  async inspect(selection: BucketSelection, timeoutMs = ADMIN_QUERY_TIMEOUT_MS): Promise<BucketReading[]> {
    const rows = await this.adminQuery(inspectSql, selection, timeoutMs, 'read')
    // Rows come in no particular order: the named ones are put back in the order asked.
    const named = new Map<string, BucketReading>()
    const prefixed: BucketReading[] = []
    for (const { named: isNamed, ...reading } of rows) {
      if (isNamed) named.set(reading.key, reading)
      else prefixed.push(reading)
    }
    return [...selection.keys.map((key) => named.get(key) ?? { key, used: 0, resetSeconds: null }), ...prefixed]
  }

  /** Deletes the selected buckets for every replica (resetSql), one statement bounded by `timeoutMs`. */
  reset(selection: BucketSelection, timeoutMs = ADMIN_QUERY_TIMEOUT_MS): Promise<BucketReading[]> {
    return this.adminQuery(resetSql, selection, timeoutMs, 'reset').then((rows) =>
      rows.map((r) => ({ key: r.key, used: r.used, resetSeconds: r.resetSeconds })),
    )
  }

  private async adminQuery(
    sql: (clock: string, prefixed: boolean) => string,
    selection: BucketSelection,
    timeoutMs: number,
    what: string,
  ): Promise<Array<BucketReading & { named?: boolean }>> {
    const prefixes = selection.prefixes ?? []
    const values: unknown[] = prefixes.length > 0 ? [selection.keys, prefixes] : [selection.keys]
    if (this.clock !== null) values.push(this.clock())
    const clock = this.clock === null ? 'clock_timestamp()' : `$${values.length}::timestamptz`
    const { client, remaining } = await this.connectWithin(timeoutMs, what)
    type Row = { key: string; used: number; reset_seconds: number | null; named?: boolean }
    let rows: Row[]
    try {
      rows = (await client.query<Row>({ text: sql(clock, prefixes.length > 0), values, query_timeout: remaining } as QueryConfig)).rows
    } catch (err) {
      client.release(isServerError(err as Error) ? undefined : (err as Error))
      throw err
    }
    client.release()
    return rows.map((r) => ({ key: r.key, used: r.used, resetSeconds: r.reset_seconds, named: r.named }))
  }

  /** Replicas alive on this database as its heartbeats last said (this one included), at least 1. */
  liveReplicas(): number {
    return this.heartbeat.liveReplicas()
  }

  /** Checks asked and statements sent so far: round trips per check = statements ÷ checks. */
  stats(): PostgresBudgetStats {
    return { checks: this.checks, statements: this.statements }
  }

  /**
   * What a bring-up step (budget/open.ts) runs once the database answers and is migrated: the clock offset (so even the first
   * check carries an absolute deadline), then this replica's first heartbeat and its timer.
   */
  async start(): Promise<void> {
    await this.calibrate()
    await this.heartbeat.start()
  }

  /** Measures the database clock offset before the first check, so even that check carries an absolute deadline. */
  async calibrate(samples = 3): Promise<void> {
    for (let i = 0; i < samples; i++) {
      const sentAt = localEpochMs()
      const r = await this.pool.query<{ ms: number }>('SELECT extract(epoch FROM clock_timestamp())::double precision * 1000 AS ms')
      this.sampleOffset(sentAt, localEpochMs(), r.rows[0].ms)
    }
  }

  /**
   * Stops the heartbeat (removing this replica's row) and waits for the statements in flight, the
   * verdicts we gave up on and the refunds they start. The pool belongs to postgres/open.ts (audit and
   * readiness share it), which closes it last.
   */
  async close(): Promise<void> {
    this.closed = true
    if (this.drainTimer !== null) clearInterval(this.drainTimer)
    this.drainTimer = null
    await this.heartbeat.close()
    while (this.lateWork.size > 0) await Promise.all([...this.lateWork])
  }

  private compactQueue(): void {
    this.queue = this.queue.filter((c) => c.state === QUEUED)
    this.abandonedQueued = 0
  }

  /** Starts statements for the checks waiting, up to maxStatements in flight; each takes every check queued so far. */
  private pump(): void {
    while (this.queue.length > 0 && this.inFlight < this.statementsAllowed()) {
      const batch = this.takeBatch()
      if (batch === null) break
      this.inFlight++
      this.track(this.runBatch(batch))
    }
    // Checks wait behind a statement that may be stuck: look again once it counts as stalled. (Once it
    // does, the checks still queued need its rows: a statement's end starts their next one.)
    if (this.queue.length > 0 && this.inFlight > 0 && this.inFlight < this.maxStatements && this.stallTimer === null) {
      const wait = Math.ceil(this.oldestStart() + STALLED_AFTER_MS - performance.now())
      if (wait > 0) {
        this.stallTimer = setTimeout(() => {
          this.stallTimer = null
          this.pump()
        }, wait)
        this.stallTimer.unref()
      }
    }
  }

  /**
   * One statement at a time (the batches grow with the load, rows are locked once per batch), more
   * only while the oldest has been in flight STALLED_AFTER_MS: a statement held by a row lock that
   * someone keeps (an operator's open transaction) must not hold every other check of the replica,
   * which would otherwise wait behind it until their deadlines and fail.
   */
  private statementsAllowed(): number {
    // Beside a statement carrying local units, none: a check judged beside it would be judged on counts
    // that may lack them (it waits, or passes its bound and is judged locally, as during the outage).
    if (this.inFlight === 0 || this.carrying) return 1
    return performance.now() - this.oldestStart() >= STALLED_AFTER_MS ? this.maxStatements : 1
  }

  /** The keys of the statements in flight (only while one is stalled: a few Set inserts per check). */
  private keysInFlight(): Set<string> {
    const keys = new Set<string>()
    for (const batch of this.sent) for (const c of batch) for (const charge of c.charges) keys.add(charge.key)
    return keys
  }

  private oldestStart(): number {
    let oldest = Infinity
    for (const t of this.startedAt) oldest = Math.min(oldest, t)
    return oldest
  }

  /**
   * The next batch from the queue, up to MAX_BATCH_CHECKS checks, or null when none can go. Beside a
   * statement in flight (a stalled one), checks that need one of its rows would only wait on the same
   * lock and take the checks batched with them down too: they stay queued for a later statement.
   */
  private takeBatch(): PendingCheck[] | null {
    const held = this.sent.size === 0 ? null : this.keysInFlight()
    const waiting = this.queue
    const batch: PendingCheck[] = []
    const left: PendingCheck[] = []
    let i = 0
    for (; i < waiting.length && batch.length < MAX_BATCH_CHECKS; i++) {
      const c = waiting[i]
      if (c.state !== QUEUED) continue
      if (held !== null && c.charges.some((charge) => held.has(charge.key))) left.push(c)
      else batch.push(c)
    }
    this.queue = i < waiting.length ? left.concat(waiting.slice(i)) : left
    if (this.queue.length === 0) this.abandonedQueued = 0
    return batch.length === 0 ? null : batch
  }

  /**
   * One connection's run: a statement for `first`, then, while checks keep arriving, one for each batch
   * that waited, on the same connection. Each next statement is sent before the verdicts of the one
   * before are delivered: the calls they release would otherwise run first and hold it back. Never rejects.
   */
  private async runBatch(first: PendingCheck[]): Promise<void> {
    const slot = { startedAt: performance.now(), batch: first }
    this.startedAt.push(slot.startedAt)
    this.sent.add(slot.batch)
    let client: PoolClient | null = null
    try {
      let latest = 0
      for (const c of first) latest = Math.max(latest, c.deadline)
      try {
        client = await this.connect(latest)
      } catch (err) {
        for (const c of first) c.fail(err as Error)
        this.drainLater()
        return
      }
      let pending = this.send(client, first)
      while (pending !== null) {
        let row: AdmitRow
        try {
          row = (await pending.query).rows[0]
        } catch (err) {
          // The transaction rolled back (or its answer never came): the local units it carried wait again.
          if (pending.statement.carries !== null) this.handOverEnded(pending.statement.carries, false)
          // An error the server sent (a lock timeout, every deadline passed) leaves the connection ready
          // for the next statement; anything else (a client-side timeout, a broken socket) leaves it in
          // an unknown state, possibly still busy with ours: drop it rather than hand it on.
          client.release(isServerError(err as Error) ? undefined : (err as Error))
          client = null
          for (const c of pending.live) c.fail(err as Error)
          this.drainLater()
          return
        }
        // Before the next statement takes what still waits, and before the verdicts are delivered (the
        // stage then remembers the shared counts, which already hold the units).
        if (pending.statement.carries !== null) this.handOverEnded(pending.statement.carries, true)
        else if (this.handOver?.holdsCounts === true) this.handOver.landed()
        this.sampleOffset(pending.sentAt, localEpochMs(), row.db_epoch_ms)
        this.sent.delete(slot.batch)
        const next = this.queue.length === 0 || this.carrying ? null : this.takeBatch()
        let following: SentBatch | null = null
        if (next !== null) {
          this.startedAt[this.startedAt.indexOf(slot.startedAt)] = slot.startedAt = performance.now()
          this.sent.add((slot.batch = next))
          following = this.send(client, next)
        }
        this.deliver(pending, row)
        pending = following
      }
    } finally {
      client?.release()
      this.startedAt.splice(this.startedAt.indexOf(slot.startedAt), 1)
      this.sent.delete(slot.batch)
      this.inFlight--
      this.pump()
    }
  }

  /**
   * Sends the statement for the checks of `batch` still waiting (their callers may have given up while
   * it waited for a connection), or returns null when none is, or when every one's bound has gone.
   */
  private send(client: PoolClient, batch: readonly PendingCheck[]): SentBatch | null {
    const live = batch.filter((c) => c.state === QUEUED)
    if (live.length === 0) return null
    const statement = this.statement(live)
    if (statement === null) {
      for (const c of live) c.fail(new Error('no budget verdict: the whole bound went on waiting for a database connection'))
      return null
    }
    for (const c of live) c.state = SENT
    this.statements++
    if (statement.carries !== null) this.carrying = true
    const sentAt = localEpochMs()
    const localAdmissions = this.handOver?.localAdmissions ?? 0
    return { live, statement, sentAt, localAdmissions, query: client.query<AdmitRow>(statement.query) }
  }

  /**
   * After a failed statement: once the database answers again, local units go back even if no check
   * comes. (The units of the checks this failure makes the stage judge locally come right after it:
   * the timer's first round looks.)
   */
  private drainLater(): void {
    if (this.drainTimer !== null || this.handOver === null || this.closed) return
    this.drainTimer = setInterval(() => this.drain(), DRAIN_INTERVAL_MS)
    this.drainTimer.unref()
  }

  /** Sends a statement carrying the local units waiting, unless checks already go (they carry them). */
  private drain(): void {
    const handOver = this.handOver
    if (this.closed || handOver === null || !handOver.holdsCounts) {
      if (this.drainTimer !== null) clearInterval(this.drainTimer)
      this.drainTimer = null
      return
    }
    if (this.inFlight > 0 || this.queue.length > 0) return
    // More than one statement's worth waiting (MAX_HANDED_EXTRA buckets each): the next one at once.
    this.admit(HANDOVER_PROBE, this.checkTimeoutMs, handOver).then(
      () => this.drain(),
      () => undefined,
    )
  }

  /** The statement carrying local units ended: committed (`landed`) or not. */
  private handOverEnded(handOver: LocalHandOver, landed: boolean): void {
    this.carrying = false
    if (!landed) {
      handOver.failed()
      return
    }
    const units = handOver.landed()
    this.log?.info('budget store answers again: local counts handed to it', { units })
  }

  /**
   * Each check's verdict from the statement's row; an admitted one its caller gave up on is refunded.
   * So is an admitted one judged before a check this replica admitted locally while the statement was in
   * flight (the store failed meanwhile for that one): the shared counts it was judged on lack those
   * units, so it is not given; its caller judges it locally too, on counts that have them.
   */
  private deliver(sent: SentBatch, row: AdmitRow): void {
    const checks = sent.live
    const slots = sent.statement.slots
    const stale = this.handOver !== null && this.handOver.localAdmissions !== sent.localAdmissions
    // Per key, the units the checks not given took from it: one refund statement for them all (a key's
    // window is one within a statement, so a key's refunds add up).
    let takenBack: Map<string, { cost: number; window: WindowId }> | null = null
    let offset = 0
    for (let j = 0; j < checks.length; j++) {
      const c = checks[j]
      const refusedBy = row.refused_by[j]
      if (c.state === ABANDONED_SENT) {
        if (refusedBy === -1) this.refundLate(c.charges, toResult(c.charges, refusedBy, row, slots, offset).buckets)
        c.state = DONE
      } else if (refusedBy === -2) {
        c.fail(new Error('budget check passed its deadline on the database'))
      } else if (stale && refusedBy === -1) {
        takenBack ??= new Map()
        for (let i = 0; i < c.charges.length; i++) {
          const charge = c.charges[i]
          if (!charge.charged) continue
          const seen = takenBack.get(charge.key)
          if (seen === undefined) takenBack.set(charge.key, { cost: charge.cost, window: row.key_ends[slots[offset + i]] })
          else seen.cost += charge.cost
        }
        c.fail(new Error('the shared verdict was judged without calls this replica admitted locally meanwhile'))
      } else {
        c.state = DONE
        c.resolve(toResult(c.charges, refusedBy, row, slots, offset))
      }
      offset += c.charges.length
    }
    if (takenBack !== null) this.refundStale(takenBack)
  }

  /** Takes back what the checks `deliver` did not give had charged, in one statement, like a late verdict's refund. */
  private refundStale(takenBack: ReadonlyMap<string, { cost: number; window: WindowId }>): void {
    const keys: string[] = []
    const costs: number[] = []
    const ends: string[] = []
    for (const [key, { cost, window }] of takenBack) {
      if (window === null) continue
      keys.push(key)
      costs.push(cost)
      ends.push(String(window))
    }
    if (keys.length === 0) return
    this.track(
      this.boundedStatement(REFUND_SQL, [keys, costs, ends], this.checkTimeoutMs, 'refund').catch((err: unknown) =>
        this.warn?.warn('budget-refund', 'could not refund budget checks judged without the calls admitted locally meanwhile', {
          cause: describeError(err),
        }),
      ),
    )
  }

  private sampleOffset(sentAt: number, receivedAt: number, dbMs: number): void {
    const rtt = receivedAt - sentAt
    if (rtt <= this.offsetRttMs || receivedAt - this.offsetSampledAt > OFFSET_SAMPLE_MAX_AGE_MS) {
      this.dbOffsetMs = dbMs - (sentAt + receivedAt) / 2
      this.offsetRttMs = rtt
      this.offsetSampledAt = receivedAt
    }
  }

  /**
   * Refunds an admitted verdict that arrived after we gave up on it: its charged buckets only, bounded by
   * the check bound like any refund (close() waits for it, so a hung network must not hold a shutdown).
   */
  private refundLate(charges: readonly BucketCharge[], buckets: readonly BucketState[]): void {
    const values = refundValues(
      charges,
      buckets.map((b) => b.window),
    )
    if (values === null) return
    this.track(
      this.boundedStatement(REFUND_SQL, values, this.checkTimeoutMs, 'refund').then(
        () => this.onRefunded?.(),
        (err: unknown) =>
          this.warn?.warn('budget-refund', 'could not refund a budget check that was admitted after the gateway stopped waiting', {
            cause: describeError(err),
          }),
      ),
    )
  }

  /** A pooled connection within `timeoutMs`, and the milliseconds of that bound left for the statement. */
  private async connectWithin(timeoutMs: number, what: string): Promise<{ client: PoolClient; remaining: number }> {
    const deadline = performance.now() + Math.max(1, timeoutMs)
    const client = await this.connect(deadline)
    const remaining = Math.floor(deadline - performance.now())
    if (remaining <= 0) {
      client.release()
      throw new Error(`no budget ${what} within ${timeoutMs} ms: the whole bound went on waiting for a connection`)
    }
    return { client, remaining }
  }

  /** One statement on a pooled connection, bounded by `timeoutMs` from the pool wait to the answer. */
  private async boundedStatement(text: string, values: unknown[], timeoutMs: number, what: string): Promise<void> {
    const { client, remaining } = await this.connectWithin(timeoutMs, what)
    try {
      await client.query({ text, values, query_timeout: remaining } as QueryConfig)
    } catch (err) {
      // As in runBatch: only an error the server sent leaves the connection fit for the next query.
      client.release(isServerError(err as Error) ? undefined : (err as Error))
      throw err
    }
    client.release()
  }

  /** `work` must not reject: close() waits for it with Promise.all. */
  private track(work: Promise<void>): void {
    const done: Promise<void> = work.finally(() => this.lateWork.delete(done))
    this.lateWork.add(done)
  }

  private async connect(deadline: number): Promise<PoolClient> {
    const pending = this.pool.connect()
    try {
      const waitMs = deadline - performance.now()
      return await withDeadline(pending, waitMs, `no database connection within ${Math.round(waitMs)} ms`)
    } catch (err) {
      // The pool may still hand us a connection later: give it straight back.
      pending.then(
        (late) => late.release(),
        () => undefined,
      )
      throw err
    }
  }

  /**
   * The batch statement for `checks`, each with its own deadline, or null when every check's bound has
   * already gone (on the pool wait). Each distinct key is sent once; charges name it by position.
   */
  private statement(checks: readonly PendingCheck[]): BatchStatement | null {
    const now = performance.now()
    const nowEpoch = localEpochMs()
    const positions = new Map<string, number>()
    const keys: string[] = []
    const slots: number[] = []
    const sizes: number[] = []
    const limits: number[] = []
    const windows: number[] = []
    const costs: number[] = []
    const charged: boolean[] = []
    const deadlines: Array<number | null> = []
    const budgets: number[] = []
    let latest = 0
    for (let j = 0; j < checks.length; j++) {
      const check = checks[j]
      const remainingMs = Math.floor(check.deadline - now)
      latest = Math.max(latest, remainingMs)
      // The database keeps SERVER_MARGIN_MS back, so its verdict travels back before our deadline.
      budgets.push(Math.max(1, remainingMs - SERVER_MARGIN_MS))
      deadlines.push(this.dbOffsetMs === null ? null : nowEpoch + remainingMs - SERVER_MARGIN_MS + this.dbOffsetMs)
      sizes.push(check.charges.length)
      for (const c of check.charges) {
        let slot = positions.get(c.key)
        if (slot === undefined) {
          slot = keys.length
          positions.set(c.key, slot)
          keys.push(c.key)
        }
        slots.push(slot)
        limits.push(c.limit)
        windows.push(c.windowSeconds)
        // A cost above the limit is refused whatever the count; clamped so that count + cost never
        // overflows the integer columns (a batch of 10,000 calls at cost 1,000,000 would, and the
        // error would fail the check open).
        costs.push(Math.min(c.cost, c.limit + 1))
        charged.push(c.charged)
      }
    }
    if (latest <= 0) return null
    // Taken only now that the statement goes: the units are in flight from here until its end.
    const handOver = this.handOver
    const handed = handOver === null ? null : handOver.take(keys, MAX_HANDED_EXTRA)
    const handedCounts: number[] = []
    const handedWindows: number[] = []
    if (handed !== null) {
      handedCounts.length = handedWindows.length = keys.length
      handedCounts.fill(0)
      handedWindows.fill(0)
      for (const h of handed) {
        let slot = positions.get(h.key)
        if (slot === undefined) {
          // A bucket of the hand-over that no check of this statement names: locked in key order too.
          slot = keys.length
          positions.set(h.key, slot)
          keys.push(h.key)
        }
        handedCounts[slot] = Math.min(2147483647, h.count)
        handedWindows[slot] = h.windowSeconds
      }
    }
    // 1-based on the database.
    const values: unknown[] = [
      keys,
      slots.map((k) => k + 1),
      sizes,
      limits,
      windows,
      costs,
      charged,
      deadlines,
      budgets,
      this.synchronousCommit,
      handedCounts,
      handedWindows,
    ]
    if (this.clock !== null) values.push(this.clock())
    return {
      slots,
      carries: handed === null ? null : handOver,
      query: {
        // Named: parsed and planned once per connection; after that only Bind/Execute/Sync are sent.
        name: this.admitName,
        text: this.admitSql,
        values,
        // The database gave up at the latest deadline; this only frees a connection whose answer never comes.
        query_timeout: latest + LATE_RESULT_GRACE_MS,
      } as QueryConfig,
    }
  }
}

/**
 * While a statement runs, every check that arrives waits for the next one, so batches grow with the
 * load and each row is locked once per batch. A second statement would only split the batch: measured
 * on the 2-core machine with Postgres on the same host (the store alone, 32 checks in flight), one
 * statement at a time gave 15.7k checks/s on a hot key and 18k spread, two 10.3k and 16.4k, four 6.9k
 * and 9.0k (statements on the same rows queue on their locks). So more start only once the oldest has
 * been in flight this long: waiting on a lock someone holds, not working.
 */
const STALLED_AFTER_MS = 200

/** The hard cap on statements in flight: half the pool, 1 to 4, so audit writes and refunds always find a connection. */
function defaultMaxStatements(pool: Pool): number {
  const size = (pool.options as { max?: number }).max ?? 10
  return Math.max(1, Math.min(4, Math.floor(size / 2)))
}

/** pg's DatabaseError: an ErrorResponse from the server, which ends the statement but not the session. */
function isServerError(err: Error): boolean {
  // FATAL and PANIC end the session too; only a plain ERROR leaves it usable.
  return (err as Error & { severity?: unknown }).severity === 'ERROR'
}

/** One check's result: its charges are `row`'s per-charge entries from `offset`, their keys at `slots`. */
function toResult(
  charges: readonly BucketCharge[],
  refusedBy: number,
  row: AdmitRow,
  slots: readonly number[],
  offset: number,
): AdmitResult {
  const buckets = new Array<BucketState>(charges.length)
  for (let i = 0; i < charges.length; i++) {
    const c = charges[i]
    const used = row.used[offset + i]
    const key = slots[offset + i]
    // -1: no open window (nothing used, a whole window ahead).
    const reset = used < 0 ? null : row.key_reset[key]
    buckets[i] = {
      remaining: Math.max(0, c.limit - Math.max(0, used)),
      // Never more than the window: a check that took its lock sooner after arrival than the one that
      // opened the window would otherwise announce a few µs past it, and Retry-After would say 61 s.
      resetSeconds: reset === null ? c.windowSeconds : Math.min(c.windowSeconds, Math.max(0, reset)),
      window: used < 0 ? null : row.key_ends[key],
    }
  }
  return { admitted: refusedBy < 0, buckets, refusedBy }
}
