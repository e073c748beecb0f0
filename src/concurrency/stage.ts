import type { Metrics } from '../metrics'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'
import { type ConcurrencyLimiter, concurrencyKey } from './limiter'
import { SUBSCRIPTIONS_LISTEN } from '../jsonrpc/mcp-headers'

/**
 * Right after auth: one identity may have at most `limiter.maxPerKey` requests in flight, GET/SSE
 * streams included, so a caller whose requests the upstream never answers cannot hold every upstream
 * socket. The slot is taken here and its key recorded on `ex.concurrencyKey`; the finish phase gives
 * it back once the response has ended, whatever happened in between (refused later, failed, client
 * gone, stream closed), just before the request's audit record.
 * A request without a principal (none gets past auth today) holds no slot.
 *
 * Runs after the body is parsed, because `initialize` is not refused at the cap (DESIGN.md: a 4xx there
 * pushes clients onto the legacy transport): a lone initialize request takes a slot past the cap, up
 * to twice the cap, rather than a 429. Reading the body first costs no upstream socket, which is what
 * the cap protects; max_body_bytes and request_timeout_seconds bound what a capped caller can make
 * the gateway buffer.
 */
export function concurrencyStage(limiter: ConcurrencyLimiter, metrics: Metrics): Stage {
  const refusal: Refusal = {
    status: 429,
    decision: 'throttled',
    reason: `concurrency limit: ${limiter.maxPerKey} requests in flight for this identity (max_concurrent_per_identity)`,
    message: 'Too many requests in flight',
    // A slot frees as soon as one of the caller's own requests ends: 1 s is the smallest honest wait.
    data: { retry_after_seconds: 1 },
    headers: { 'retry-after': '1', 'cache-control': 'no-store' },
    // For a model (tool_refusals: result): only the caller's own cap, which its own calls fill.
    agentText: `Too many calls in flight for you (cap ${limiter.maxPerKey}). Retry when one of your calls finishes.`,
  }
  const sessionLimit = 2 * limiter.maxPerKey
  return {
    name: 'concurrency',
    run(ex: Exchange) {
      const principal = ex.principal
      if (principal === null) return CONTINUE
      const key = concurrencyKey(principal.tenant, principal.identity)
      // An initialize or a subscriptions/listen may go past the cap, but only so far: a caller whose
      // upstream never answers must not hold sockets without bound by sending nothing but these.
      if (!limiter.tryAcquire(key, passesCap(ex) ? sessionLimit : limiter.maxPerKey)) {
        metrics.concurrencyRefused.inc()
        return refusal
      }
      ex.concurrencyKey = key
      return CONTINUE
    },
    finish(ex: Exchange) {
      if (ex.concurrencyKey === null) return
      limiter.release(ex.concurrencyKey)
      ex.concurrencyKey = null
    },
  }
}

/**
 * True for a lone `initialize` request (with an id), what a client sends to open a session, or a lone
 * `subscriptions/listen` request (MCP 2026-07-28), the long-lived stream that replaced the GET
 * stream: an agent whose calls fill the cap must still get its change notifications (issue 12). It
 * still counts, so listen streams stay bounded per identity. Not a batch holding one, nor a
 * notification of that name: either would carry other calls past the cap.
 */
function passesCap(ex: Exchange): boolean {
  const call = ex.single
  if (call === null || call.id === undefined) return false
  return call.method === 'initialize' || call.method === SUBSCRIPTIONS_LISTEN
}
