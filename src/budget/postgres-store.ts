import type { Pool, PoolClient, QueryConfig } from 'pg'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'
import { withDeadline } from '../deadline'
import type { AdmitResult, BucketCharge, BucketState, BudgetStore, WindowId } from './store'

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
   * (migrations/002-window-clock.ts, 003-charged-buckets.ts), and deadlines stay on the real database clock.
   */
  readonly clock?: () => Date
  /** Called once per admitted check that was refunded because its verdict arrived after we gave up on it. */
  readonly onRefunded?: () => void
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
 * The one statement of a check (the version 3 function: migrations/003-charged-buckets.ts); `clock` is
 * the window clock's SQL: clock_timestamp(), or a test's parameter.
 */
function admitSql(clock: string): string {
  return `SELECT refused_by, used, reset_seconds, window_ends, db_epoch_ms
  FROM wardline_budget_admit($1::text[], $2::integer[], $3::double precision[], $4::integer[], $5::boolean[],
                             $6::integer, $7::double precision, $8::boolean, ${clock})`
}

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
  refused_by: number
  used: number[]
  reset_seconds: number[]
  window_ends: Array<string | null>
  db_epoch_ms: number
}

/**
 * REFUND_SQL's parameters for what an admitted check charged: its charged buckets that have a window
 * (an admitted charged bucket always has one; the check is skipped for a null defensively). `windows[i]`
 * is the bucket's ends_at as the database wrote it (window_ends). Null when there is nothing to take back.
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

/**
 * Budget buckets in the shared budget_buckets table: every replica on one database enforces the same
 * limits (DESIGN.md "Budget semantics", "Storage"). Each check is ONE statement, a call to
 * wardline_budget_admit (postgres/migrations/003-charged-buckets.ts), whatever number of tiers applies
 * and whichever of them it charges: all-or-nothing, atomic, windows on the database clock, rows locked
 * in key order (deadlock-free). A bucket's window is its row's ends_at, as text (window_ends).
 *
 * No ghost increments, because a check that hangs must become "failed open", never a late charge:
 *  - our deadline covers the pool wait and the query;
 *  - it travels with the statement, translated to the database clock (the offset is measured on every
 *    check, keeping the sample with the shortest round trip). The database refuses a statement that
 *    arrives after it (a network that held it back), ends lock waits at it and rolls back a check that
 *    would finish past it;
 *  - a verdict that was committed in time but reached us after we gave up (an event loop busy past
 *    the deadline) is refunded at once, in the window it was charged to.
 */
export class PostgresBudgetStore implements BudgetStore {
  private readonly checkTimeoutMs: number
  private readonly synchronousCommit: boolean
  private readonly warn: RateLimitedLog | null
  /** The injected window clock, or null for the database clock (production). */
  private readonly clock: (() => Date) | null
  /** Name and text of the prepared admit statement, fixed by the clock at construction. */
  private readonly admitName: string
  private readonly admitSql: string
  private readonly onRefunded: (() => void) | null
  /** Database clock minus local clock (ms), from the sample with the shortest round trip; null until measured. */
  private dbOffsetMs: number | null = null
  private offsetRttMs = Infinity
  private offsetSampledAt = 0
  /** Abandoned verdicts still awaited and refunds still running: close() waits for them. */
  private readonly lateWork = new Set<Promise<void>>()

  constructor(
    private readonly pool: Pool,
    options: PostgresBudgetStoreOptions,
  ) {
    this.checkTimeoutMs = options.checkTimeoutMs
    this.synchronousCommit = options.synchronousCommit ?? false
    this.warn = options.log ? new RateLimitedLog(options.log) : null
    this.clock = options.clock ?? null
    // Two texts, two names: pg refuses to prepare one name for two texts on the same connection, and
    // a test may run a store on each clock over one pool. The names differ from the previous
    // release's texts (the version 2 function) for the same reason.
    this.admitName = this.clock === null ? 'wardline_budget_admit_v3' : 'wardline_budget_admit_v3_injected_clock'
    this.admitSql = admitSql(this.clock === null ? 'clock_timestamp()' : '$9::timestamptz')
    this.onRefunded = options.onRefunded ?? null
  }

  async admit(charges: readonly BucketCharge[], timeoutMs = this.checkTimeoutMs): Promise<AdmitResult> {
    if (charges.length === 0) return { admitted: true, buckets: [], refusedBy: -1 }
    const deadline = performance.now() + Math.max(1, timeoutMs - CALLER_MARGIN_MS)
    const client = await this.connect(deadline)
    const remaining = Math.floor(deadline - performance.now())
    if (remaining <= 0) {
      client.release()
      throw new Error(`no budget verdict within ${timeoutMs} ms: the whole bound went on waiting for a connection`)
    }
    const sentAt = localEpochMs()
    const verdict = client.query<AdmitRow>(this.statement(charges, remaining, sentAt + remaining)).then(
      (result) => {
        client.release()
        this.sampleOffset(sentAt, localEpochMs(), result.rows[0].db_epoch_ms)
        return result.rows[0]
      },
      (err: Error) => {
        // An error the server sent (a lock timeout, our deadline) leaves the connection ready for the
        // next check; anything else (a client-side timeout, a broken socket) leaves it in an unknown
        // state, possibly still busy with our statement: drop it rather than hand it on.
        client.release(isServerError(err) ? undefined : err)
        throw err
      },
    )
    let abandoned = false
    const settled = verdict.then(
      (row) => {
        if (abandoned && row.refused_by < 0) this.refundLate(charges, row)
      },
      () => undefined,
    )
    try {
      return toResult(charges, await withDeadline(verdict, remaining, `no budget verdict within ${remaining} ms`))
    } catch (err) {
      abandoned = true
      // close() waits for the verdict too (bounded by the statement's query_timeout), not only for
      // refunds already started: a verdict still on the wire at shutdown would otherwise meet a closed
      // pool and its charge would never be taken back.
      this.track(settled)
      throw err
    }
  }

  /**
   * Takes back what an admitted check charged, in the windows `result` names (window_ends), so a bucket
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
    const work = this.refundWithin(values, timeoutMs)
    this.track(work.catch(() => undefined))
    return work
  }

  /**
   * Measures the database clock offset before the first check (compose.ts calls it at startup), so
   * even that check carries an absolute deadline.
   */
  async calibrate(samples = 3): Promise<void> {
    for (let i = 0; i < samples; i++) {
      const sentAt = localEpochMs()
      const r = await this.pool.query<{ ms: number }>('SELECT extract(epoch FROM clock_timestamp())::double precision * 1000 AS ms')
      this.sampleOffset(sentAt, localEpochMs(), r.rows[0].ms)
    }
  }

  /**
   * Waits for the verdicts we gave up on and the refunds they start. The pool belongs to compose.ts
   * (audit and readiness share it), which closes it last.
   */
  async close(): Promise<void> {
    while (this.lateWork.size > 0) await Promise.all([...this.lateWork])
  }

  private sampleOffset(sentAt: number, receivedAt: number, dbMs: number): void {
    const rtt = receivedAt - sentAt
    if (rtt <= this.offsetRttMs || receivedAt - this.offsetSampledAt > OFFSET_SAMPLE_MAX_AGE_MS) {
      this.dbOffsetMs = dbMs - (sentAt + receivedAt) / 2
      this.offsetRttMs = rtt
      this.offsetSampledAt = receivedAt
    }
  }

  /** Refunds an admitted verdict that arrived after we gave up on it: its charged buckets only. */
  private refundLate(charges: readonly BucketCharge[], row: AdmitRow): void {
    const values = refundValues(charges, row.window_ends)
    if (values === null) return
    this.track(
      this.pool.query(REFUND_SQL, values).then(
        () => this.onRefunded?.(),
        (err: unknown) =>
          this.warn?.warn('budget-refund', 'could not refund a budget check that was admitted after the gateway stopped waiting', {
            cause: describeError(err),
          }),
      ),
    )
  }

  private async refundWithin(values: unknown[], timeoutMs: number): Promise<void> {
    const deadline = performance.now() + Math.max(1, timeoutMs)
    const client = await this.connect(deadline)
    const remaining = Math.floor(deadline - performance.now())
    if (remaining <= 0) {
      client.release()
      throw new Error(`no budget refund within ${timeoutMs} ms: the whole bound went on waiting for a connection`)
    }
    try {
      await client.query({ text: REFUND_SQL, values, query_timeout: remaining } as QueryConfig)
    } catch (err) {
      // As in admit: only an error the server sent leaves the connection fit for the next query.
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

  private statement(charges: readonly BucketCharge[], remainingMs: number, deadlineLocalMs: number): QueryConfig {
    const n = charges.length
    const keys = new Array<string>(n)
    const limits = new Array<number>(n)
    const windows = new Array<number>(n)
    const costs = new Array<number>(n)
    const charged = new Array<boolean>(n)
    for (let i = 0; i < n; i++) {
      const c = charges[i]
      keys[i] = c.key
      limits[i] = c.limit
      windows[i] = c.windowSeconds
      // A cost above the limit is refused whatever the count; clamped so that count + cost never
      // overflows the integer columns (a batch of 10,000 calls at cost 1,000,000 would, and the
      // error would fail the check open).
      costs[i] = Math.min(c.cost, c.limit + 1)
      charged[i] = c.charged
    }
    const serverMs = Math.max(1, remainingMs - SERVER_MARGIN_MS)
    const serverDeadline = this.dbOffsetMs === null ? null : deadlineLocalMs - SERVER_MARGIN_MS + this.dbOffsetMs
    const values: unknown[] = [keys, limits, windows, costs, charged, serverMs, serverDeadline, this.synchronousCommit]
    if (this.clock !== null) values.push(this.clock())
    return {
      // Named: parsed and planned once per connection; after that only Bind/Execute/Sync are sent.
      name: this.admitName,
      text: this.admitSql,
      values,
      // The database gave up at serverDeadline; this only frees a connection whose answer never comes.
      query_timeout: remainingMs + LATE_RESULT_GRACE_MS,
    } as QueryConfig
  }
}

/** pg's DatabaseError: an ErrorResponse from the server, which ends the statement but not the session. */
function isServerError(err: Error): boolean {
  // FATAL and PANIC end the session too; only a plain ERROR leaves it usable.
  return (err as Error & { severity?: unknown }).severity === 'ERROR'
}

function toResult(charges: readonly BucketCharge[], row: AdmitRow): AdmitResult {
  const buckets = new Array<BucketState>(charges.length)
  for (let i = 0; i < charges.length; i++) {
    const c = charges[i]
    buckets[i] = {
      remaining: Math.max(0, c.limit - row.used[i]),
      // Never more than the window: a check that took its lock sooner after arrival than the one that
      // opened the window would otherwise announce a few µs past it, and Retry-After would say 61 s.
      resetSeconds: Math.min(c.windowSeconds, Math.max(0, row.reset_seconds[i])),
      window: row.window_ends[i] ?? null,
    }
  }
  return { admitted: row.refused_by < 0, buckets, refusedBy: row.refused_by }
}
