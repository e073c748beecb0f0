import { STATUS } from '../errors'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'
import type { AuditTrail } from './trail'

/**
 * Reserves the request's audit queue slots in every sink before anything with side effects runs
 * (docs/principles.md: nothing is executed unaudited). Placed after the JSON-RPC stage (the count depends on the
 * batch) and before budget (which charges buckets) and policy; every request that can be forwarded
 * (POST, GET streams, DELETE) passes through it. When a sink's queue has no room, the request gets
 * 503 with `Retry-After: 1` and is not forwarded: an audit sink that cannot keep up fails calls
 * closed instead of letting them run unaudited.
 *
 * A refusal rather than a thrown WardlineError: while the queue is full every call is refused, and a
 * value built once here costs no stack trace per call at the moment the gateway is under the most
 * pressure. Its reason still leads with the WL_AUDIT_BACKPRESSURE code, like a failure's.
 *
 * Holds the trail, not per-reload state: a config reload builds a new stage over the same writers,
 * and slots reserved under the old chain are released by the same trail.
 */
export function auditReservationStage(trail: AuditTrail): Stage {
  const refusals = new Map<string, Refusal>()
  for (const w of trail.writers) refusals.set(w.sink.name, backpressure(w.sink.name))
  return {
    name: 'audit-reservation',
    run(ex: Exchange) {
      const full = trail.reserve(ex)
      return full === null ? CONTINUE : (refusals.get(full.sink.name) ?? backpressure(full.sink.name))
    },
  }
}

function backpressure(sink: string): Refusal {
  return {
    status: STATUS.WL_AUDIT_BACKPRESSURE,
    decision: 'error',
    code: 'audit.backpressure',
    reason: `WL_AUDIT_BACKPRESSURE: the ${sink} audit queue has no room for this request's entries (audit.max_queue_entries): not forwarded`,
    message: 'Service unavailable',
    data: { retry_after_seconds: 1 },
    headers: { 'retry-after': '1' },
  }
}
