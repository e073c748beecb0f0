import type { Pool, PoolClient, QueryConfig } from 'pg'
import { describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'
import { withDeadline } from '../deadline'
import type { AdmitResult, BucketCharge, BucketState, BudgetStore } from './store'

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
   * (migrations/002-window-clock.ts), and deadlines stay on the real database clock.
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

/** The one statement of a check; `clock` is the window clock's SQL: clock_timestamp(), or a test's parameter. */
function admitSql(clock: string): string {
  return `SELECT refused_by, used, reset_seconds, window_ends, db_epoch_ms
  FROM wardline_budget_admit($1::text[], $2::integer[], $3::double precision[], $4::integer[],
                             $5::integer, $6::double precision, $7::boolean, ${clock})`
}

/**
 * Takes back an admitted check nobody waited for, in the window it was charged to only. The rows are
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

/** Epoch milliseconds on a monotonic clock: an NTP step on this host does not move it. */
function localEpochMs(): number {
  return performance.timeOrigin + performance.now()
}

/**
 * Budget buckets in the shared budget_buckets table: every replica on one database enforces the same
 * limits (DESIGN.md "Budget semantics", "Storage"). Each check is ONE statement, a call to
 * wardline_budget_admit (postgres/migrations/002-window-clock.ts), whatever number of tiers applies:
 * all-or-nothing, atomic, windows on the database clock, rows locked in key order (deadlock-free).
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
    // a test may run a store on each clock over one pool.
    this.admitName = this.clock === null ? 'wardline_budget_admit' : 'wardline_budget_admit_injected_clock'
    this.admitSql = admitSql(this.clock === null ? 'clock_timestamp()' : '$8::timestamptz')
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
        if (abandoned && row.refused_by < 0) this.refund(charges, row)
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

  private refund(charges: readonly BucketCharge[], row: AdmitRow): void {
    this.track(
      this.pool.query(REFUND_SQL, [charges.map((c) => c.key), charges.map((c) => c.cost), row.window_ends]).then(
        () => this.onRefunded?.(),
        (err: unknown) =>
          this.warn?.warn('budget-refund', 'could not refund a budget check that was admitted after the gateway stopped waiting', {
            cause: describeError(err),
          }),
      ),
    )
  }

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
    for (let i = 0; i < n; i++) {
      const c = charges[i]
      keys[i] = c.key
      limits[i] = c.limit
      windows[i] = c.windowSeconds
      costs[i] = c.cost
    }
    const serverMs = Math.max(1, remainingMs - SERVER_MARGIN_MS)
    const serverDeadline = this.dbOffsetMs === null ? null : deadlineLocalMs - SERVER_MARGIN_MS + this.dbOffsetMs
    const values: unknown[] = [keys, limits, windows, costs, serverMs, serverDeadline, this.synchronousCommit]
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
      kind: c.kind,
      name: c.name,
      limit: c.limit,
      windowSeconds: c.windowSeconds,
      remaining: Math.max(0, c.limit - row.used[i]),
      resetSeconds: Math.max(0, row.reset_seconds[i]),
    }
  }
  return { admitted: row.refused_by < 0, buckets, refusedBy: row.refused_by }
}
