import type { Pool, QueryConfig, QueryResult, QueryResultRow } from 'pg'
import { WardlineError, describeError } from '../errors'
import type { Logger } from '../log'
import { MIGRATIONS, type Migration } from './migrations'

/**
 * Advisory lock key taken while migrating ('wlmg' as bytes). Every replica takes the same one, so when
 * several start at once one migrates and the others wait, then find nothing left to do.
 */
const MIGRATION_LOCK = 0x776c6d67

/** How long a replica waits for another one's migrations before giving up on starting. */
const LOCK_WAIT_MS = 60_000

/**
 * Client-side bound on each migration query, in place of the pool's (meant for the request path, and
 * far too short for a migration that rewrites a large audit table or waits LOCK_WAIT_MS for the lock).
 * pg reads a per-query 0 as "use the pool's", so this is a long bound rather than none.
 */
const MIGRATION_QUERY_TIMEOUT_MS = 60 * 60_000

export interface MigrationResult {
  /** Versions this call applied (empty when another replica, or an earlier start, already had). */
  readonly applied: readonly number[]
  readonly version: number
}

/**
 * Brings the schema to the newest version. Holds a session advisory lock on one connection for the
 * whole run; each migration runs in its own transaction together with its row in
 * wardline_schema_migrations, so a failure leaves the schema at the last complete version.
 */
export async function migrate(pool: Pool, log: Logger, migrations: readonly Migration[] = MIGRATIONS): Promise<MigrationResult> {
  const client = await pool.connect()
  const query = <R extends QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>> =>
    client.query<R>({ text, values, query_timeout: MIGRATION_QUERY_TIMEOUT_MS } as QueryConfig)
  let locked = false
  let broken: unknown
  try {
    // Migrations may take longer than the pool's statement bound meant for request-path queries.
    await query(`SET statement_timeout = 0; SET lock_timeout = ${LOCK_WAIT_MS}`)
    await query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK])
    locked = true
    await query(`CREATE TABLE IF NOT EXISTS wardline_schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now())`)
    const done = new Set((await query<{ version: number }>('SELECT version FROM wardline_schema_migrations')).rows.map((r) => r.version))
    const known = Math.max(0, ...migrations.map((m) => m.version))
    const newest = Math.max(0, ...done)
    if (newest > known) {
      // A newer Wardline migrated this database; running old code against it is how data gets lost.
      throw new WardlineError(
        'WL_POSTGRES_UNAVAILABLE',
        `database schema is at version ${newest}, newer than this Wardline knows (${known}); upgrade Wardline`,
      )
    }
    const applied: number[] = []
    for (const m of [...migrations].sort((a, b) => a.version - b.version)) {
      if (done.has(m.version)) continue
      await query('BEGIN')
      try {
        await query(m.sql)
        await query('INSERT INTO wardline_schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name])
        await query('COMMIT')
      } catch (err) {
        await query('ROLLBACK').catch(() => undefined)
        throw new WardlineError('WL_POSTGRES_UNAVAILABLE', `migration ${m.version} (${m.name}) failed: ${describeError(err)}`, {
          cause: err,
        })
      }
      applied.push(m.version)
      log.info('postgres migration applied', { version: m.version, name: m.name })
    }
    return { applied, version: Math.max(newest, ...applied) }
  } catch (err) {
    broken = err
    if (err instanceof WardlineError) throw err
    throw new WardlineError('WL_POSTGRES_UNAVAILABLE', `postgres migrations failed: ${describeError(err)}`, { cause: err })
  } finally {
    if (locked) await query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined)
    await query('RESET statement_timeout; RESET lock_timeout').catch((err) => {
      broken ??= err
    })
    // A connection that failed mid-migration may be in any state: let the pool discard it.
    client.release(broken instanceof Error ? broken : undefined)
  }
}
