import type { Pool } from 'pg'
import type { LocalCount, LocalHandOver } from '../../src/budget/store'

/** Helpers for tests that look at, or hold, budget_buckets rows of the Postgres budget store. */

/** A bucket's stored count, or null when it has no row. */
export async function countOf(pool: Pool, key: string): Promise<number | null> {
  const r = await pool.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1', [key])
  return r.rows.length === 0 ? null : r.rows[0].count
}

/** Sessions of this database waiting for a lock (a check queued behind a row someone holds). */
export async function lockWaits(pool: Pool): Promise<number> {
  const r = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
  )
  return r.rows[0].n
}

/**
 * Sessions of this database, the asking one aside, with a statement running or a transaction open.
 * Once it reads 0 after a row lock is let go, a statement that was queued behind the lock (an
 * abandoned check, say) has committed or rolled back: what it would charge is in the table.
 */
export async function busySessions(pool: Pool): Promise<number> {
  const r = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'",
  )
  return r.rows[0].n
}

/**
 * Holds `key`'s row lock (creating the row, already expired, if missing) until the returned function
 * is called: a stuck transaction elsewhere. Releasing twice is harmless.
 */
export async function holdRow(pool: Pool, key: string): Promise<() => Promise<void>> {
  await pool.query("INSERT INTO budget_buckets (key, count, ends_at) VALUES ($1, 0, '-infinity') ON CONFLICT DO NOTHING", [key])
  const holder = await pool.connect()
  await holder.query('BEGIN')
  await holder.query('SELECT * FROM budget_buckets WHERE key = $1 FOR UPDATE', [key])
  let released = false
  return async () => {
    if (released) return
    released = true
    await holder.query('COMMIT')
    holder.release()
  }
}

/**
 * A LocalHandOver for store tests, standing in for the local limiter: units added wait until a
 * statement takes them (all of them, whatever its keys), go back when it fails, and are tallied per
 * bucket once it committed.
 */
export class HandOverLedger implements LocalHandOver {
  localAdmissions = 0
  /** Units landed per bucket. */
  readonly landedUnits = new Map<string, number>()
  /** Statements that took units. */
  takes = 0
  private waiting = new Map<string, LocalCount>()
  private inFlight: Map<string, LocalCount> | null = null

  get holdsCounts(): boolean {
    return this.waiting.size > 0 || this.inFlight !== null
  }

  add(counts: readonly LocalCount[]): void {
    for (const c of counts) {
      const seen = this.waiting.get(c.key)
      this.waiting.set(c.key, { key: c.key, count: (seen?.count ?? 0) + c.count, windowSeconds: c.windowSeconds })
    }
  }

  take(): LocalCount[] | null {
    if (this.inFlight !== null || this.waiting.size === 0) return null
    this.takes++
    this.inFlight = this.waiting
    this.waiting = new Map()
    return [...this.inFlight.values()]
  }

  landed(): number {
    let units = 0
    for (const c of this.inFlight?.values() ?? []) {
      units += c.count
      this.landedUnits.set(c.key, (this.landedUnits.get(c.key) ?? 0) + c.count)
    }
    this.inFlight = null
    return units
  }

  failed(): void {
    const taken = this.inFlight
    this.inFlight = null
    if (taken !== null) this.add([...taken.values()])
  }
}
