import { Socket } from 'node:net'
import { Client, type ClientConfig, Pool } from 'pg'
import type { PostgresConfig } from '../config/types'
import { withDeadline } from '../deadline'
import { WardlineError, describeError } from '../errors'
import { RateLimitedLog, type Logger } from '../log'

export interface PoolOptions {
  /**
   * Longest wait for a connection, whether the pool is full or a new connection is being opened.
   * postgres/open.ts passes budget.check_timeout_seconds: a budget check cannot use a connection it gets later.
   */
  readonly connectionTimeoutMs?: number
  /**
   * Server-side bound on any statement on this pool, a backstop behind the tighter per-check bounds
   * of the budget store (docs/postgres.md). Migrations lift it for themselves with SET LOCAL.
   */
  readonly statementTimeoutMs?: number
  /** Client-side bound on one query: a hung network must not hold a request (or the audit loop) forever. */
  readonly queryTimeoutMs?: number
  readonly applicationName?: string
}

/**
 * The one pg.Pool for every Postgres feature (budget, audit, readiness), sized by
 * postgres.max_connections. `error` listeners are always attached, on the pool and on every
 * connection: pg emits `error` when a connection dies (a database restart, a failover, an
 * idle-session timeout), and an EventEmitter `error` without a listener terminates the process.
 */
export function openPool(config: PostgresConfig, log: Logger, options: PoolOptions = {}): Pool {
  const pool = new Pool({
    connectionString: config.dsn,
    max: config.maxConnections,
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5000,
    query_timeout: options.queryTimeoutMs ?? 30_000,
    statement_timeout: options.statementTimeoutMs ?? 30_000,
    idleTimeoutMillis: 30_000,
    application_name: options.applicationName ?? 'wardline',
    // Connections are checked by use; keepalive lets the kernel notice a peer that vanished silently.
    keepAlive: true,
  })
  const warn = new RateLimitedLog(log)
  const lost = (err: Error): void => {
    warn.warn('postgres-connection-lost', 'postgres connection lost (the pool reconnects on demand)', { cause: describeError(err) })
  }
  pool.on('error', lost)
  // The pool listens only to idle connections; one that is checked out between two queries (a
  // migration, the reaper) emits `error` on the client itself when the server goes away.
  pool.on('connect', (client) => client.on('error', lost))
  return pool
}

/**
 * Opens one connection and runs `SELECT 1`, so startup fails at once with one clear line when the
 * database is unreachable instead of at the first request. Bounded by `timeoutMs` whatever hangs.
 */
export async function checkReachable(pool: Pool, timeoutMs: number): Promise<void> {
  try {
    await withDeadline(pool.query('SELECT 1'), timeoutMs, `no answer within ${Math.round(timeoutMs)} ms`)
  } catch (err) {
    throw new WardlineError('WL_POSTGRES_UNAVAILABLE', 'postgres is unreachable', { cause: err })
  }
}

/**
 * A connection of its own, outside the pool (same DSN, TLS and credentials), every wait bounded by
 * `timeoutMs`, on a socket the caller holds: a hung network is ended by destroying it, not by
 * waiting for a goodbye that never comes. Its `error` events are the caller's to listen to.
 */
export function dedicatedClient(
  pool: Pool,
  options: { readonly applicationName: string; readonly timeoutMs: number; readonly keepAlive: boolean },
): { readonly client: Client; readonly socket: Socket } {
  const socket = new Socket()
  const client = new Client({
    ...(pool.options as ClientConfig),
    application_name: options.applicationName,
    connectionTimeoutMillis: options.timeoutMs,
    query_timeout: options.timeoutMs,
    statement_timeout: options.timeoutMs,
    keepAlive: options.keepAlive,
    stream: () => socket,
  })
  return { client, socket }
}
