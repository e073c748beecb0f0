import type { Pool } from 'pg'
import type { Config } from '../config/types'
import type { Contribution } from '../feature'
import type { Logger } from '../log'
import { PostgresBringUp } from './bring-up'
import { migrate } from './migrate'
import { checkReachable, openPool } from './pool'

/** Bound on reaching the database, at startup and on each attempt after: one clear line instead of hanging. */
const POSTGRES_STARTUP_TIMEOUT_MS = 5000

/**
 * The one pool for every Postgres feature, and the steps that bring its storage up. Features that
 * keep something in Postgres add their steps to `bringUp` while they open; `launch()` runs once they all have.
 */
export interface PostgresFeature extends Contribution {
  readonly pool: Pool
  readonly bringUp: PostgresBringUp
  /** budget.on_store_error closed: a step that fails while opening stops startup. */
  readonly failsClosed: boolean
  /**
   * Once every Postgres user has opened: the steps added since the first attempt run now (unless one
   * already failed); storage not ready by then is announced once and brought up in the background.
   * Its contribution is the bring-up's closer, folded after every Postgres user so that it is released
   * before them: no step starts a reaper or a heartbeat after its closer ran.
   */
  launch(): Promise<Contribution>
}

/**
 * features.postgres_storage with a `postgres:` block: the one pool, reached and migrated now if the
 * database answers. If it does not: a WL_POSTGRES_UNAVAILABLE error with budget.on_store_error closed
 * (nothing is served without the shared budgets), else the bring-up is left to the background
 * (launch). Null when Postgres storage is off.
 */
export async function openPostgres(config: Config, log: Logger): Promise<PostgresFeature | null> {
  if (!postgresStorageOn(config)) return null
  const checkTimeoutMs = config.budget.checkTimeoutSeconds * 1000
  const pool = openPool(config.postgres as NonNullable<Config['postgres']>, log, {
    // A budget check cannot use a connection it gets after its own deadline. (A reload that raises
    // check_timeout_seconds keeps this startup bound: checks then fail open early, never late.)
    connectionTimeoutMs: Math.max(1, checkTimeoutMs),
    // The server-side backstop must not cut a check the config allows to run longer.
    statementTimeoutMs: Math.max(30_000, checkTimeoutMs + 1000),
  })
  // Bounded: against a blackholed network pg waits for goodbyes that never come; by then every audit
  // entry is in the table or fsynced in the spill file, so giving up on the goodbye loses nothing.
  const endPool = (): Promise<void> => Promise.race([pool.end(), new Promise<void>((r) => setTimeout(r, 3000).unref())])
  const bringUp = new PostgresBringUp(log)
  const schema = { version: null as number | null }
  bringUp.add({ name: 'reachable', run: () => checkReachable(pool, POSTGRES_STARTUP_TIMEOUT_MS) })
  bringUp.add({
    name: 'migrations',
    run: async () => {
      schema.version = (await migrate(pool, log)).version
    },
  })
  // budget.on_store_error closed: the operator prefers no service to service without shared budgets.
  const failsClosed = config.budget.onStoreError === 'closed'
  try {
    await bringUp.startupAttempt(failsClosed)
  } catch (err) {
    await Promise.resolve(endPool()).catch(() => undefined)
    throw err
  }
  return {
    pool,
    bringUp,
    failsClosed,
    // The first closer, so the pool is released last (after the audit trail is flushed into it).
    closers: [endPool],
    async launch() {
      try {
        await bringUp.startupAttempt(failsClosed)
      } catch (err) {
        await bringUp.close()
        throw err
      }
      if (!bringUp.ready) {
        const fallback = config.features.budgetEnforcement
          ? `budget.on_store_error: ${config.budget.onStoreError}`
          : 'audit entries spilled to audit.spill_file'
        log.warn(`postgres is not ready at startup: serving with ${fallback} until it answers (retrying in the background)`, {
          cause: bringUp.cause,
        })
      }
      const after = bringUp.attempts
      bringUp.launch(() =>
        log.info('postgres storage ready', {
          schema_version: schema.version,
          max_connections: config.postgres?.maxConnections,
          ...(bringUp.attempts > after ? { attempts: bringUp.attempts } : {}),
        }),
      )
      return { closers: [() => bringUp.close()] }
    },
  }
}

/** features.postgres_storage is on and a `postgres:` block says where. */
export function postgresStorageOn(config: Config): boolean {
  return config.features.postgresStorage && config.postgres !== null
}
