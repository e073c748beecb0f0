import type { Pool } from 'pg'

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
