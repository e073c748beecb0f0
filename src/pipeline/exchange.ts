import type { IncomingMessage, ServerResponse } from 'node:http'
import type { ReasonCode } from './reason'
import type { Refusal, Stage } from './stage'
import { type StateKey, initialState } from './state'

export const DECISIONS = ['allow', 'deny', 'throttled', 'passthrough', 'error', 'unauthorized'] as const
export type Decision = (typeof DECISIONS)[number]

export type JsonRpcId = string | number | null

/**
 * C0, DEL and C1 controls. No legitimate identity, tenant, method or target holds one, and every one of
 * them ends up in audit lines, logs and database rows (Postgres text refuses NUL): the stages that
 * fill a Principal or an RpcCall refuse values that do.
 */
export function hasControlCharacters(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) return true
  }
  return false
}

/** The verified caller. Both strings are validated by the auth stage and otherwise opaque. */
export interface Principal {
  readonly identity: string
  readonly tenant: string
  /**
   * The token's `jti` (a string claim, as signed), for revocation by token id; null when the token has
   * none or it is not a string. Authenticators always set it (null in header mode), so every principal
   * has one shape; it is optional here only for principals built by hand.
   */
  readonly tokenId?: string | null
  /** The token's `iat` (seconds since the epoch, as signed), for revocation by issue time; null when absent (header mode too). */
  readonly issuedAt?: number | null
}

/** One JSON-RPC message of the request body (a batch has several). */
export interface RpcCall {
  /** The request id, `undefined` for a notification. */
  readonly id: JsonRpcId | undefined
  readonly method: string
  /**
   * Tool name, prompt name or resource URI for gated methods (for completion/complete, the prompt
   * name or the resource URI or URI template of its `params.ref`); '' otherwise.
   */
  readonly target: string
  /** tools/call, resources/*, prompts/* and completion/complete: the methods budget and policy look at. */
  readonly gated: boolean
  /**
   * The method the policy judges this call as: its own for tools/call, resources/* and prompts/*;
   * `prompts/get` or `resources/read` for a completion/complete of a prompt or a resource (the call
   * it completes, mcp/methods.ts COMPLETION_REFS); '' when the call is not gated.
   */
  readonly policyMethod: string
  /**
   * Why this element was refused, when a stage singled it out (policy rule index), then what the
   * answer phase noted on it (what its list hid); written only through pipeline/reason.ts.
   */
  reason: string
  /** Set when a stage singled this element out (`policy.denied`); null otherwise. */
  reasonCode: ReasonCode | null
  /** The NOTE kinds of pipeline/reason.ts noted on this element. */
  noteKinds: number
  /** tools/call: where params.arguments lies in the body, bytes [argumentsStart, argumentsEnd); -1 when absent. */
  readonly argumentsStart: number
  readonly argumentsEnd: number
}

/**
 * One object per request, carrying what the stages learn to the forwarder and to the audit entry.
 * Every field exists from the constructor on, so every Exchange has one shape (hot path).
 */
export class Exchange {
  principal: Principal | null = null
  /**
   * The name of the server (config `servers:`) this request is routed to, set by the route that runs
   * it; null with `upstream:` alone (one server, no name) and for a path that names no server.
   */
  server: string | null = null
  /**
   * Whose sessions a session id names (session/stage.ts): the routed server's origin, so that two
   * server names in front of one upstream share its sessions and their owners (a session created
   * through one name is refused to another caller through the other); null with `upstream:` alone.
   */
  sessionScope: string | null = null
  /**
   * The path and query sent upstream, set by the router when the gateway serves several servers
   * (`/mcp/<name>` becomes the server's endpoint path); null: the request's own, after the upstream's
   * base path.
   */
  upstreamPath: string | null = null
  /** The exact request body bytes (POST only); forwarded unchanged. */
  body: Buffer | null = null
  /** The parsed JSON-RPC messages of a POST body, in order. */
  calls: RpcCall[] = []
  /** True when the body was a JSON array (a batch), even of one element. */
  batch = false
  /** Set by a refusal or a failure; null while the request is on its way to the upstream. */
  decision: Decision | null = null
  /**
   * For operators (audit); never sent to the caller. An ordinary allow keeps it empty. Written only
   * through pipeline/reason.ts (setCause, addNote), so no note is lost to a later one.
   */
  reason = ''
  /** The audit `reason_code`: why the request got its decision (pipeline/reason.ts); null for an ordinary allow. */
  reasonCode: ReasonCode | null = null
  /** The NOTE kinds of pipeline/reason.ts added to `reason`. */
  noteKinds = 0
  status = 0
  /**
   * Set by the policy stage when policy denies this request. The refusal itself is answered after the
   * budget stage (principles.md, What a call costs), which charges a denied call to the caller only.
   */
  denial: Refusal | null = null
  /** Headers a stage wants on the forwarded response (RateLimit fields on an admitted call). */
  responseHeaders: Record<string, string> | null = null
  /** Set when the gateway gave up on the response (client gone, upstream stream broke). */
  aborted = false
  /** How many stages' `run` was called (runStages): the finish phase releases exactly those. */
  stagesRun = 0
  /** The stages that read this request's answer (pipeline/answer.ts), in chain order; null for most requests. */
  answerReaders: Stage[] | null = null
  /** True when one of answerReaders reads the answer's messages (the relay then reads JSON and SSE bodies). */
  readsMessages = false
  /** True once answerReaders heard the outcome (it is reported once). */
  outcomeReported = false
  /** What a stage or a metric threw while the answer was relayed (pipeline/answer.ts, the relay), which they must not; null when none did. */
  answerFailure: Error | null = null
  /** Set when shutdown cut this request's connection after the grace period (its audit reason says so). */
  cutAtShutdown = false
  /** True once the request was handed to the upstream (a refused or failed-before request stays false). */
  forwarded = false
  /** Monotonic clock (performance.now()) when the upstream got it (Upstream.forward): where wardline_forwarded_call_duration_seconds starts. */
  forwardedMonoMs = 0
  /**
   * The request's Origin when it is in allowed_origins (as the browser sent it), else null: every
   * response then carries CORS headers for it, local answers and forwarded ones alike (http stage).
   */
  corsOrigin: string | null = null
  /** Links of the gateway's list of running requests (linked-list.ts); null when not on it. */
  listPrev: Exchange | null = null
  listNext: Exchange | null = null
  /** What each stage keeps for itself about this request (get/set, pipeline/state.ts); null until a stage sets one. */
  private stageState: unknown[] | null = null

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly requestId: string,
    /** Wall clock (epoch ms) for the audit timestamp. */
    readonly startedAtMs: number,
    /** Monotonic clock (performance.now()) for the latency. */
    readonly startedMonoMs: number,
  ) {}

  /** A stage's own datum for this request (pipeline/state.ts): the key's initial value until `set`. */
  get<T>(key: StateKey<T>): T {
    const state = this.stageState
    // The state array holds at index i a value of key i's type: only set() writes it, typed by the same key.
    return state !== null && key.index < state.length ? (state[key.index] as T) : key.initial
  }

  set<T>(key: StateKey<T>, value: T): void {
    let state = this.stageState
    if (state === null || key.index >= state.length) state = this.newState(state)
    state[key.index] = value
  }

  /** The state array on the first set; a longer one when a key was declared after this request began. */
  private newState(old: unknown[] | null): unknown[] {
    const state = initialState()
    if (old !== null) for (let i = 0; i < old.length; i++) state[i] = old[i]
    this.stageState = state
    return state
  }

  /** The body's one message, or null for a batch (even of one) and for a request without JSON-RPC. */
  get single(): RpcCall | null {
    return this.batch || this.calls.length !== 1 ? null : this.calls[0]
  }

  /** The id to echo in an error body: the single message's id, else null (batches, unparsed). */
  get replyId(): JsonRpcId {
    return this.single?.id ?? null
  }

  get sessionId(): string {
    const value = this.req.headers['mcp-session-id']
    if (typeof value === 'string') return value
    // The legacy transport's POST /messages?sessionId=…, read the way the upstream reads it (first value).
    const url = this.req.url ?? ''
    const q = url.indexOf('?')
    if (q < 0 || !url.includes('sessionId=', q)) return ''
    return new URLSearchParams(url.slice(q + 1)).get('sessionId') ?? ''
  }
}
