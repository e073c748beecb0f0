import type { Pool } from 'pg'
import { describeError } from '../errors'
import type { ReadinessCheck } from '../readiness'
import { withDeadline } from '../deadline'
import { dedicatedClient } from './pool'

/** /readyz answers within this bound even when the database hangs, as docs/postgres.md ("Health") states. */
const PING_TIMEOUT_MS = 2000

export interface PostgresReadinessOptions {
  readonly timeoutMs?: number
  /** Spilled audit entries waiting for the database, reported beside the ping. */
  readonly auditSpillPending?: () => boolean
  /**
   * Why Postgres storage is not brought up yet (unreachable at startup, migrations not run), or null
   * once it is. While it says why, the check fails with that cause instead of pinging: a database that
   * answers a ping is still not ready for budget checks until its schema is there.
   */
  readonly notReady?: () => string | null
}

/**
 * The Postgres dependency for /readyz: `SELECT 1` on a connection of its own, opened for the ping and
 * always closed after it, bounded (connect, query and the whole ping each within timeoutMs). It does
 * not go through the shared pool, so a pool busy with budget checks does not make a healthy database
 * look down (and a ping never waits in the pool's queue). A replica whose database does not answer
 * reports 503 so a load balancer can route around it, even though its budget checks would fail open
 * rather than fail. The pool's saturation is reported in the body instead: connections in use, idle,
 * and callers waiting for one.
 */
export function postgresReadiness(pool: Pool, options: PostgresReadinessOptions = {}): ReadinessCheck {
  const timeoutMs = options.timeoutMs ?? PING_TIMEOUT_MS
  return {
    name: 'postgres',
    async check() {
      const started = performance.now()
      const detail = {
        pool_total: pool.totalCount,
        pool_idle: pool.idleCount,
        pool_waiting: pool.waitingCount,
        ...(options.auditSpillPending ? { audit_spill_pending: options.auditSpillPending() } : {}),
      }
      const why = options.notReady?.() ?? null
      if (why !== null) return { ok: false, detail: { error: `not ready: ${why}; retrying`, ...detail } }
      try {
        await withDeadline(ping(pool, timeoutMs), timeoutMs, `no answer within ${timeoutMs} ms`)
        return { ok: true, detail: { latency_ms: Math.round(performance.now() - started), ...detail } }
      } catch (err) {
        return { ok: false, detail: { error: describeError(err), ...detail } }
      }
    },
  }
}

/**
 * Connects with the pool's settings (same DSN, TLS, credentials), runs SELECT 1, and always
 * disconnects. The socket is ours, so it is destroyed outright when a polite goodbye gets no answer
 * (a hung network would otherwise keep it half-closed, one more per ping).
 */
async function ping(pool: Pool, timeoutMs: number): Promise<void> {
  const { client, socket } = dedicatedClient(pool, { applicationName: 'wardline-readyz', timeoutMs, keepAlive: false })
  // A connection that dies mid-ping emits `error`; without a listener that would end the process.
  client.on('error', () => undefined)
  try {
    await client.connect()
    await client.query('SELECT 1')
  } finally {
    const destroy = setTimeout(() => socket.destroy(), timeoutMs)
    destroy.unref()
    void client
      .end()
      .catch(() => undefined)
      .finally(() => {
        clearTimeout(destroy)
        socket.destroy()
      })
  }
}
