import type { ConcurrencyMetrics } from './metrics'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'
import { stateKey } from '../pipeline/state'
import { LegacyOwed } from './legacy-owed'
import { ConcurrencyLimiter, concurrencyKey } from './limiter'
import { SUBSCRIPTIONS_LISTEN } from '../mcp/streams'

/**
 * How many POST bodies of one identity may be read at once past its cap, to find out whether they
 * are what the cap lets through (a lone initialize or subscriptions/listen, a client's responses and
 * notifications). Small and fixed: it bounds the memory a capped caller can fill with bodies it never
 * finishes (60 half-sent 4 MiB bodies of one identity held +226 MiB for 300 s without a bound) to
 * (cap + 8) × max_body_bytes, while a burst of a client's answers to sampling or elicitation requests
 * (each read in one event-loop turn when small) still finds a slot.
 */
export const PENDING_BODIES = 8

/** Key of the per-identity slot the request holds, released in the finish phase; null when none. */
export const SLOT = stateKey<string | null>('concurrency.slot', null)
/**
 * True while that slot is a pending one, taken past the cap for a POST whose body is still to be
 * read; the verdict stage turns it into a slot, no slot or a 429 once the body is parsed.
 */
export const PENDING = stateKey<boolean>('concurrency.pending', false)

/** The two stages of the cap: one right after auth, one once the body is parsed. */
export interface ConcurrencyStages {
  /** After auth and revocation, before the body is read: a slot, a pending slot, or 429. */
  readonly slot: Stage
  /** After the body is parsed: what a pending slot becomes, and no slot for a client's answers. */
  readonly verdict: Stage
}

/**
 * One identity may have at most `limiter.maxPerKey` requests in flight, GET/SSE streams included, so
 * a caller whose requests the upstream never answers cannot hold every upstream socket, nor make the
 * gateway buffer bodies without bound. Counted from the moment the request is authenticated: the
 * `slot` stage runs right after auth (and revocation), before a byte of the body is read, and records
 * the key on the request (SLOT); its finish phase gives the slot back once the response has ended,
 * whatever happened in between (refused later, failed, client gone, stream closed), just before the
 * request's audit record. A request without a principal (none gets past auth today) holds no slot.
 *
 * Some requests must not be refused at the cap, and which they are is only known from the body:
 * - a lone `initialize` (docs/principles.md, "Smaller rules": a 4xx there pushes clients onto the legacy
 *   transport) and a lone `subscriptions/listen` (MCP 2026-07-28's change-notification stream: an
 *   agent whose calls fill the cap must still get its notifications) go past the cap, counted, up to twice it;
 * - a body of JSON-RPC responses and notifications only (a client's answer to the server's
 *   sampling/createMessage, elicitation/create or roots/list; notifications/cancelled,
 *   notifications/initialized) is never refused and, once read, holds no slot: refusing it leaves the
 *   server's request, and the tool call waiting on it, hanging, or a cancelled call running. The
 *   server bounds them (it answers them at once, with 202, and only asked for so many).
 * So a POST arriving at the cap takes one of PENDING_BODIES pending slots while its body is read, and
 * the `verdict` stage decides once it is parsed: a slot (up to twice the cap for those two, up to the
 * cap for any other request, as one may have freed meanwhile), no slot, or 429; the pending slot is
 * released either way. Past the pending slots too, 429 before the body is read.
 *
 * A GET (the standalone SSE stream of Streamable HTTP, the legacy /sse stream) carries no call and is
 * the GET-era form of subscriptions/listen: the stream a server's sampling and elicitation requests
 * and its notifications arrive on, which the official SDK client does not retry after a 429. It goes
 * past the cap the same way, up to twice it, so a session opened while its calls fill the cap still
 * gets one.
 */
export function concurrencyStages(
  limiter: ConcurrencyLimiter,
  metrics: ConcurrencyMetrics,
  /** The longest upstream timeout of any route, read when a legacy POST ends (legacy-owed.ts). */
  upstreamTimeoutSeconds: () => number = () => 30,
): ConcurrencyStages {
  const refusal: Refusal = {
    status: 429,
    decision: 'throttled',
    code: 'concurrency.limit',
    reason: `concurrency limit: ${limiter.maxPerKey} requests in flight for this identity (max_concurrent_per_identity)`,
    message: 'Too many requests in flight',
    // A slot frees as soon as one of the caller's own requests ends: 1 s is the smallest honest wait.
    data: { retry_after_seconds: 1 },
    headers: { 'retry-after': '1', 'cache-control': 'no-store' },
    // For a model (tool_refusals: result): only the caller's own cap, which its own calls fill.
    agentText: `Too many calls in flight for you (cap ${limiter.maxPerKey}). Retry when one of your calls finishes.`,
  }
  const streamLimit = 2 * limiter.maxPerKey
  // In the stages every reload reuses (server/chain.ts), like the limiter: pending counts survive a reload.
  const pending = new ConcurrencyLimiter(PENDING_BODIES)
  const legacy = new LegacyOwed(limiter, () => upstreamTimeoutSeconds() * 1000)
  const slot: Stage = {
    name: 'concurrency',
    // Every GET stream's messages: a legacy /sse stream carries the answers its session's POSTs owe.
    answers: { methods: [], reads: 'messages', streams: true },
    run(ex: Exchange) {
      const principal = ex.principal
      if (principal === null) return CONTINUE
      const key = concurrencyKey(principal.tenant, principal.identity)
      const method = ex.req.method
      if (limiter.tryAcquire(key, method === 'GET' ? streamLimit : limiter.maxPerKey)) {
        ex.set(SLOT, key)
        return CONTINUE
      }
      if (method === 'POST' && pending.tryAcquire(key)) {
        ex.set(SLOT, key)
        ex.set(PENDING, true)
        return CONTINUE
      }
      metrics.concurrencyRefused.inc()
      return refusal
    },
    onMessage(ex: Exchange, message: string): string {
      legacy.onMessage(ex, ex.get(SLOT), message)
      return message
    },
    finish(ex: Exchange) {
      const key = ex.get(SLOT)
      if (key === null) return
      if (ex.req.method === 'GET') legacy.streamEnded(ex)
      if (ex.get(PENDING)) pending.release(key)
      // A legacy POST's slot stays taken (owed) until its answer passes on the session's /sse stream.
      else if (!legacy.keeps(ex)) limiter.release(key)
      ex.set(SLOT, null)
      ex.set(PENDING, false)
    },
  }
  const verdict: Stage = {
    name: 'concurrency-verdict',
    run(ex: Exchange) {
      const key = ex.get(SLOT)
      if (key === null) return CONTINUE
      const answers = onlyAnswers(ex)
      if (!ex.get(PENDING)) {
        // Below the cap it took a slot like any request; answers give it back now they are read.
        if (answers) {
          limiter.release(key)
          ex.set(SLOT, null)
        } else legacy.admit(ex, key)
        return CONTINUE
      }
      pending.release(key)
      ex.set(PENDING, false)
      if (answers) {
        ex.set(SLOT, null)
        return CONTINUE
      }
      // A slot that freed while the body arrived serves a call as well: it was counted all along.
      if (limiter.tryAcquire(key, opensStream(ex) ? streamLimit : limiter.maxPerKey)) {
        legacy.admit(ex, key)
        return CONTINUE
      }
      ex.set(SLOT, null)
      metrics.concurrencyRefused.inc()
      return refusal
    },
  }
  return { slot, verdict }
}

/**
 * True for a lone `initialize` request (with an id), what a client sends to open a session, or a lone
 * `subscriptions/listen` request (MCP 2026-07-28), the long-lived stream that replaced the GET stream.
 * Not a batch holding one, nor a notification of that name: either would carry other calls past the cap.
 */
function opensStream(ex: Exchange): boolean {
  const call = ex.single
  if (call === null || call.id === undefined) return false
  return call.method === 'initialize' || call.method === SUBSCRIPTIONS_LISTEN
}

/**
 * True when every message of the body is a JSON-RPC response (parse.ts gives it method '') or an MCP
 * notification (no id, a `notifications/` method: every notification a client sends is one). A
 * message without an id but with another method (a `tools/call` sent as a notification) is no
 * notification to MCP and runs where a lenient server runs it: it counts like a call.
 */
function onlyAnswers(ex: Exchange): boolean {
  const calls = ex.calls
  if (calls.length === 0) return false
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    if (call.method === '') continue
    if (call.id !== undefined || !call.method.startsWith('notifications/')) return false
  }
  return true
}
