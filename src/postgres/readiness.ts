import type { Pool } from 'pg'
import { describeError } from '../errors'
import type { ReadinessCheck } from '../server/routes'
import { withDeadline } from './pool'

/** /readyz answers within this bound even when the database hangs (issue 6: "bounded, 2 s"). */
const PING_TIMEOUT_MS = 2000

export interface PostgresReadinessOptions {
  readonly timeoutMs?: number
  /** Spilled audit entries waiting for the database, reported beside the ping. */
  readonly auditSpillPending?: () => boolean
}

/**
 * The Postgres dependency for /readyz: one `SELECT 1` through the shared pool, bounded. A replica
 * whose database does not answer reports 503 so a load balancer can route around it, even though its
 * budget checks would fail open rather than fail.
 */
export function postgresReadiness(pool: Pool, options: PostgresReadinessOptions = {}): ReadinessCheck {
  const timeoutMs = options.timeoutMs ?? PING_TIMEOUT_MS
  return {
    name: 'postgres',
    async check() {
      const started = performance.now()
      const spill = options.auditSpillPending ? { audit_spill_pending: options.auditSpillPending() } : {}
      try {
        await withDeadline(pool.query('SELECT 1'), timeoutMs, 'no answer')
        return { ok: true, detail: { latency_ms: Math.round(performance.now() - started), ...spill } }
      } catch (err) {
        return { ok: false, detail: { error: describeError(err), ...spill } }
      }
    },
  }
}
