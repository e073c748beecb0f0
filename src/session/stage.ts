import type { Config } from '../config/types'
import { type Logger, RateLimitedLog } from '../log'
import type { SessionMetrics } from './metrics'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Outcome, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { type StateKey, stateKey } from '../pipeline/state'
import { type Eviction, SessionBindings, type SessionOwner } from './bindings'
import { endpointParameters } from '../mcp/legacy-endpoint'

/** The session an open GET stream of its owner keeps from idling out (released in `finish`); null when none. */
const PINNED = stateKey<string | null>('session.pinned', null)
/** The session an open legacy /sse stream created: it does not idle out while the stream is open. */
const LEGACY_PINNED = stateKey<string | null>('legacy-session.pinned', null)

/**
 * A session belongs to the principal that created it. Anyone who knows an `Mcp-Session-Id` (every
 * audit entry carries it) could otherwise call tools in it, open its GET stream (and receive the
 * owner's sampling and elicitation requests) or DELETE it.
 *
 * The answer of an `initialize` names the session it created in its `Mcp-Session-Id` header (MCP
 * 2025-03-26 and later, Streamable HTTP, "Session Management"): `onOutcome` binds that id to the
 * caller before any byte of the answer reaches the client. A request that presents a bound id (the
 * header, or the legacy transport's `sessionId` / `session_id` query parameter) from another
 * principal gets the 404 the transport gives an unknown session ("the server MUST respond to requests
 * containing that session ID with HTTP 404 Not Found"): the caller learns nothing it would not learn
 * from a made-up id. A successful DELETE by the owner forgets the binding (`finish`).
 *
 * Sessions are the routed server's (`ex.sessionScope`, its upstream's origin): an id is bound at the
 * server whose answer named it, and judged there and at every server name in front of the same
 * upstream origin, which may accept it just the same (bindings.ts).
 *
 * Runs right after authentication, before the body is read: a refused request costs no buffering.
 * An id the gateway never saw created (created before a restart, through another replica, or idled
 * out) passes: the upstream still validates it, as it did before this stage existed.
 */
export function sessionStage(bindings: SessionBindings, onRefused: () => void = () => undefined): Stage {
  return {
    name: 'session',
    answers: { methods: ['initialize'], reads: 'outcome' },
    run(ex: Exchange): Verdict {
      const principal = ex.principal
      if (principal === null || bindings.size === 0) return CONTINUE
      const header = ex.req.headers['mcp-session-id']
      const url = ex.req.url ?? ''
      const server = ex.sessionScope
      if (!headerAllowed(bindings, header, principal, server) || (url.includes('?') && !queryAllowed(bindings, url, principal, server))) {
        onRefused()
        return NOT_YOURS
      }
      if (ex.req.method === 'GET' && typeof header === 'string' && bindings.pin(header, principal, server)) ex.set(PINNED, header)
      return CONTINUE
    },
    onOutcome(ex: Exchange, outcome: Outcome): void {
      const principal = ex.principal
      const id = outcome.headers?.['mcp-session-id']
      // Called only for requests that hold an initialize (`answers`): the answer that creates a session.
      if (principal === null || typeof id !== 'string' || outcome.status < 200 || outcome.status > 299) return
      bindings.bind(id, principal, ex.sessionScope)
    },
    finish(ex: Exchange): void {
      if (ex.req.method === 'GET') return unpin(bindings, PINNED, ex)
      if (ex.req.method !== 'DELETE' || !ex.forwarded || ex.status < 200 || ex.status > 299 || ex.principal === null) return
      const id = ex.req.headers['mcp-session-id']
      if (typeof id === 'string') bindings.release(id, ex.principal, ex.sessionScope)
    },
  }
}

/**
 * The legacy HTTP+SSE transport (MCP 2024-11-05): GET /sse opens the session, and the stream's first
 * event (`event: endpoint`) names the URL its messages go to, `/messages?sessionId=…` (TypeScript SDK)
 * or `/messages/?session_id=…` (Python SDK). This reader of every GET stream binds that id to the
 * stream's caller before the event reaches the client. It does not idle out while that stream is
 * open (the session lives exactly as long at the server); after, it idles out as any other.
 */
export function legacySessionStage(bindings: SessionBindings): Stage {
  return {
    name: 'legacy-session',
    answers: { methods: [], reads: 'messages', streams: true },
    run: () => CONTINUE,
    onMessage(ex: Exchange, data: string): string {
      // The endpoint event's data is a URL (every other event's a JSON-RPC message); it comes first.
      const principal = ex.principal
      if (principal === null || ex.get(LEGACY_PINNED) !== null) return data
      const parameters = endpointParameters(data)
      if (parameters === null) return data
      for (const [name, value] of parameters) {
        if (!isSessionParameter(name) || value === '') continue
        bindings.bind(value, principal, ex.sessionScope)
        if (bindings.pin(value, principal, ex.sessionScope)) ex.set(LEGACY_PINNED, value)
        break
      }
      return data
    },
    finish: (ex: Exchange) => unpin(bindings, LEGACY_PINNED, ex),
  }
}

function unpin(bindings: SessionBindings, pinned: StateKey<string | null>, ex: Exchange): void {
  const id = ex.get(pinned)
  if (id === null) return
  ex.set(pinned, null)
  bindings.unpin(id, ex.sessionScope)
}

const NOT_YOURS: Refusal = {
  status: 404,
  decision: 'deny',
  code: 'session.not_owner',
  reason: 'session created by another principal (Mcp-Session-Id or sessionId of a session this caller did not initialize)',
  message: 'Session not found',
}

/**
 * The `Mcp-Session-Id` header as every upstream may read it: the text, and when Node joined repeated
 * field lines (with `, `), each line on its own (Starlette reads the first, Node the joined text).
 */
function headerAllowed(
  bindings: SessionBindings,
  header: string | string[] | undefined,
  caller: SessionOwner,
  server: string | null,
): boolean {
  if (typeof header !== 'string') return true
  if (!bindings.allows(header, caller, server)) return false
  if (!header.includes(',')) return true
  for (const part of header.split(',')) if (!bindings.allows(part.trim(), caller, server)) return false
  return true
}

/**
 * Every value of a `sessionId` / `session_id` query parameter (Express reads the first, Starlette the
 * last), names read decoded (`session%5Fid` is `session_id` to every upstream) and with brackets
 * (Express's qs reads `sessionId[]=x` as `['x']`, which indexes a Map-like object as `x`).
 */
function queryAllowed(bindings: SessionBindings, url: string, caller: SessionOwner, server: string | null): boolean {
  for (const [name, value] of new URLSearchParams(url.slice(url.indexOf('?') + 1))) {
    if (isSessionParameter(name) && !bindings.allows(value, caller, server)) return false
  }
  return true
}

/**
 * The legacy transport's session parameter as the SDKs name it, `sessionId` (TypeScript, Go) or
 * `session_id` (Python), in any case and with any `[…]` suffix (qs's arrays and objects).
 */
function isSessionParameter(name: string): boolean {
  const bracket = name.indexOf('[')
  const lower = (bracket < 0 ? name : name.slice(0, bracket)).toLowerCase()
  return lower === 'sessionid' || lower === 'session_id'
}

/**
 * The session feature's stages, in chain order, over one set of bindings: built once per process (a
 * reload reuses them), so sessions created before a reload stay bound after it. `now`: the clock
 * bindings idle by (tests inject one).
 */
export function sessionStages(limits: Config['limits'], metrics: SessionMetrics, log: Logger, now: () => number = Date.now): Stage[] {
  const warnings = new RateLimitedLog(log)
  const onEvicted = (cause: Eviction): void => {
    metrics.sessionBindingsEvicted.labels(cause).inc()
    const key = cause === 'full' ? 'max_sessions' : 'max_sessions_per_identity'
    warnings.warn(
      `session-${cause}`,
      `session bindings evicted before they idled out (${key} reached): those sessions are no longer checked against their creator`,
    )
  }
  const bindings = new SessionBindings(
    { idleMs: limits.sessionIdleSeconds * 1000, maxSessions: limits.maxSessions, maxPerIdentity: limits.maxSessionsPerIdentity },
    now,
    onEvicted,
  )
  return [sessionStage(bindings, () => metrics.sessionRefused.inc()), legacySessionStage(bindings)]
}
