import type { Exchange } from '../pipeline/exchange'
import { stateKey } from '../pipeline/state'
import { idKey } from '../pipeline/id-key'
import type { ConcurrencyLimiter } from './limiter'
import { endpointParameters } from '../mcp/legacy-endpoint'

/** The legacy session an open /sse stream names (its finish forgets the session); null for every other request. */
const STREAM_SESSION = stateKey<LegacySession | null>('concurrency.legacy-stream', null)
/** A legacy POST's owed slot, from the verdict to its finish (then held, or given back at once). */
const OWED = stateKey<OwedSlot | null>('concurrency.legacy-owed', null)

/**
 * The legacy HTTP+SSE transport (MCP 2024-11-05, "HTTP with SSE") answers a POST
 * /messages?sessionId=… with 202 at once and runs the call afterwards, sending its JSON-RPC response
 * on the session's GET /sse stream. A slot given back with the 202 would let an identity with a cap
 * of 2 run any number of calls at once upstream (six 4 s calls ran at once under a cap of 2). So
 * such a POST's slot is *owed*: it stays taken after the POST ends, until the answer with its id
 * passes on that session's /sse stream, that stream ends, or `upstream_timeout_seconds` passes.
 *
 * Only sessions whose /sse stream runs through this process, for the same identity (the stream's
 * concurrency key), are tracked: learnt from the stream's endpoint event, forgotten (every slot they
 * owe given back) when it ends. Memory is bounded by what the limiter already bounds: every owed
 * slot is one of the identity's `max_concurrent_per_identity` slots (twice that for initialize),
 * each with the ids of one POST body (at most one batch).
 */
export class LegacyOwed {
  /** The /sse stream of each legacy session, by the session id its endpoint event named (streamKey). */
  private readonly sessions = new Map<string, LegacySession>()

  constructor(
    private readonly limiter: ConcurrencyLimiter,
    /**
     * upstream_timeout_seconds in ms: the longest a slot is owed after its POST ended. Read when a POST
     * ends, so a reload that adds a server with a longer timeout raises it for the next ones.
     */
    private readonly timeoutMs: () => number,
  ) {}

  /**
   * Once a POST holding a slot is parsed: when it is a legacy POST of a session whose /sse stream
   * runs here for the same identity, and carries requests (messages with an id and a method), its
   * slot will be owed until their answers pass on that stream. A cheap check for every other POST.
   */
  admit(ex: Exchange, key: string): void {
    if (this.sessions.size === 0 || ex.req.headers['mcp-session-id'] !== undefined) return
    const sessionId = postSession(ex)
    if (sessionId === '') return
    const session = this.sessions.get(streamKey(ex, sessionId))
    if (session === undefined || session.key !== key) return
    let ids: string[] | null = null
    const calls = ex.calls
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i]
      if (call.id === undefined || call.method === '') continue
      ;(ids ??= []).push(idKey(call.id))
    }
    if (ids === null) return
    const owed = new OwedSlot(key, session, ids)
    for (const id of ids) {
      const waiting = session.byId.get(id)
      if (waiting === undefined) session.byId.set(id, [owed])
      else waiting.push(owed)
    }
    session.slots.add(owed)
    ex.set(OWED, owed)
  }

  /**
   * The finish phase of a POST holding a slot: true when its slot stays taken, owed (forwarded,
   * answered 2xx, some answer still to come on a stream still open); false when it is to be given
   * back now.
   */
  keeps(ex: Exchange): boolean {
    if (this.sessions.size === 0) return false
    const owed = ex.get(OWED)
    if (owed === null) return false
    ex.set(OWED, null)
    if (owed.remaining > 0 && !owed.settled && ex.forwarded && ex.status >= 200 && ex.status <= 299) {
      owed.held = true
      owed.timer = setTimeout(expire, this.timeoutMs(), owed, this.limiter)
      owed.timer.unref()
      return true
    }
    settle(owed, this.limiter)
    return false
  }

  /**
   * One message of a GET stream (the answer phase). The endpoint event (its data a URL, not JSON)
   * names a legacy session; on that session's stream, a response whose id a POST owes settles it.
   * `key`: the concurrency key of the slot the stream holds, null when it holds none.
   */
  onMessage(ex: Exchange, key: string | null, data: string): void {
    const first = data.charCodeAt(0)
    const json = first === OPEN_OBJECT || first === OPEN_ARRAY
    const session = ex.get(STREAM_SESSION)
    if (session === null) {
      if (!json && key !== null) this.learn(ex, key, data)
      return
    }
    // Requests and notifications of the server carry no answer; most stream traffic stops here.
    if (!json || session.byId.size === 0 || (!data.includes('"result"') && !data.includes('"error"') && !data.includes('\\u'))) return
    let parsed: unknown
    try {
      parsed = JSON.parse(data)
    } catch {
      return
    }
    if (Array.isArray(parsed)) for (const message of parsed) this.answered(session, message)
    else this.answered(session, parsed)
  }

  /** The finish phase of a GET stream: a legacy session's stream ended, so every slot it owes is given back. */
  streamEnded(ex: Exchange): void {
    const session = ex.get(STREAM_SESSION)
    if (session === null) return
    ex.set(STREAM_SESSION, null)
    if (this.sessions.get(session.id) === session) this.sessions.delete(session.id)
    for (const owed of session.slots) settle(owed, this.limiter)
  }

  private learn(ex: Exchange, key: string, data: string): void {
    const params = endpointParameters(data)
    if (params === null) return
    const id = params.get('sessionId') ?? params.get('session_id')
    if (!id) return
    const scoped = streamKey(ex, id)
    // A session id another open stream of the same server already named stays that stream's.
    if (this.sessions.has(scoped)) return
    const session = new LegacySession(scoped, key)
    this.sessions.set(scoped, session)
    ex.set(STREAM_SESSION, session)
  }

  private answered(session: LegacySession, message: unknown): void {
    if (message === null || typeof message !== 'object' || 'method' in message || !('id' in message)) return
    const id = message.id
    if (typeof id !== 'string' && typeof id !== 'number') return
    const key = idKey(id)
    const waiting = session.byId.get(key)
    if (waiting === undefined) return
    // The oldest POST waiting under that id (a client reusing an id in flight has two).
    const owed = waiting.shift()!
    if (waiting.length === 0) session.byId.delete(key)
    owed.ids[owed.ids.indexOf(key)] = ''
    if (--owed.remaining === 0) settle(owed, this.limiter)
  }
}

/**
 * What a legacy session is tracked under: its id, after the scope of the routed server's sessions
 * when there is one (Exchange.sessionScope, its upstream's origin), as session bindings are: one
 * server's stream never settles (or owes) another server's POSTs, and two names in front of one
 * upstream share its streams.
 */
function streamKey(ex: Exchange, sessionId: string): string {
  return ex.sessionScope === null ? sessionId : `${ex.sessionScope}/${sessionId}`
}

/**
 * The legacy session a POST goes to, read the way its server reads it: `sessionId` (TypeScript SDK,
 * Express: the first value, Exchange.sessionId) or `session_id` (Python SDK, Starlette: the last).
 * Either way the session stage made sure every value names a session of this caller.
 */
function postSession(ex: Exchange): string {
  const sessionId = ex.sessionId
  if (sessionId !== '') return sessionId
  const url = ex.req.url ?? ''
  const q = url.indexOf('?')
  if (q < 0 || !url.includes('session_id=', q)) return ''
  const values = new URLSearchParams(url.slice(q + 1)).getAll('session_id')
  return values.length === 0 ? '' : values[values.length - 1]
}

const OPEN_OBJECT = 0x7b
const OPEN_ARRAY = 0x5b

class LegacySession {
  /** The ids its POSTs still wait for (by id key), each with the slots waiting under it, oldest first. */
  readonly byId = new Map<string, OwedSlot[]>()
  /** Every slot waiting for an answer on this stream. */
  readonly slots = new Set<OwedSlot>()
  constructor(
    /** Where `sessions` holds it (streamKey). */
    readonly id: string,
    /** The concurrency key of the stream's caller: only its own POSTs owe slots here. */
    readonly key: string,
  ) {}
}

class OwedSlot {
  /** How many of `ids` are still to be answered. */
  remaining: number
  /** True once the POST ended and left its slot taken: settling gives it back. */
  held = false
  settled = false
  timer: NodeJS.Timeout | null = null
  constructor(
    readonly key: string,
    readonly session: LegacySession,
    /** The id keys of the POST's requests; '' once answered. */
    readonly ids: string[],
  ) {
    this.remaining = ids.length
  }
}

/** Forgets an owed slot everywhere, and gives it back when its POST had left it taken. Idempotent. */
function settle(owed: OwedSlot, limiter: ConcurrencyLimiter): void {
  if (owed.settled) return
  owed.settled = true
  const session = owed.session
  session.slots.delete(owed)
  for (const id of owed.ids) {
    if (id === '') continue
    const waiting = session.byId.get(id)
    if (waiting === undefined) continue
    // A batch may carry one id twice: every entry of this slot goes.
    for (let at = waiting.indexOf(owed); at >= 0; at = waiting.indexOf(owed)) waiting.splice(at, 1)
    if (waiting.length === 0) session.byId.delete(id)
  }
  if (owed.timer !== null) clearTimeout(owed.timer)
  if (owed.held) limiter.release(owed.key)
}

/** upstream_timeout_seconds passed with an answer still owed: the slot is given back all the same. */
function expire(owed: OwedSlot, limiter: ConcurrencyLimiter): void {
  owed.timer = null
  settle(owed, limiter)
}
