import type { IncomingHttpHeaders } from 'node:http'
import type { WardlineError } from '../errors'
import type { Decision, Exchange, JsonRpcId } from './exchange'
import type { ReasonCode } from './reason'

export const CONTINUE = Symbol('continue')

/** JSON-RPC 2.0 §5.1 codes for bodies that are not valid JSON-RPC (Refusal.rpcCode); every other local answer uses its status. */
export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600

/** An expected "no": the gateway answers the request itself instead of forwarding it. */
export interface Refusal {
  /** 401, 403, 413, 429…: the HTTP status, also used as the JSON-RPC error code. */
  readonly status: number
  readonly decision: Decision
  /** For operators, in the audit entry; never sent to the caller. */
  readonly reason: string
  /** The audit entry's `reason_code` (pipeline/reason.ts): what code may branch on, where `reason` is only read. */
  readonly code: ReasonCode
  /** JSON-RPC error code when it is not the status (-32700, -32600 for bodies that are not JSON-RPC). */
  readonly rpcCode?: number
  /** Short, generic, safe to show the caller. */
  readonly message: string
  /** What a client can act on (retry_after_seconds); never another caller's state. */
  readonly data?: Readonly<Record<string, unknown>>
  readonly headers?: Readonly<Record<string, string>>
  /** The id to echo when the body could not be parsed into calls but its id was readable. */
  readonly id?: JsonRpcId
  /**
   * Status and headers only, no JSON-RPC error body: a local answer that is not an error (the 204 to
   * a CORS preflight, which a browser requires to be a 2xx). `message` is then unused.
   */
  readonly noBody?: boolean
  /**
   * What a model reads when `tool_refusals: result` answers this refusal of a single tools/call as a
   * tool result (jsonrpc/refusal-result.ts): plain English, what was refused, which limit, when to
   * retry; only the caller's own limits, never a rule index or another caller's usage. Absent: the
   * refusal is always answered as an HTTP error (401, 400, 413, 503…).
   */
  readonly agentText?: string
  /** The result's `_meta` (before `decision` is added) when it must differ from `data`. */
  readonly agentMeta?: Readonly<Record<string, unknown>>
}

export type Verdict = typeof CONTINUE | Refusal

/**
 * One step of the request path. A stage is built once from its slice of config; `run` either lets the
 * request go on (CONTINUE) or answers it (a Refusal). A stage never writes to the response itself and
 * never calls the next stage: `runStages` does. It may record what it learnt on the Exchange. A stage
 * throws only for failures (a WardlineError), never for refusals.
 *
 * Three phases, each optional but the first:
 * - request: `run`, in chain order, until a stage refuses;
 * - answer (forwarded requests only): `onOutcome` and `onMessage`, for the stages whose `answers`
 *   names a method the request called (see pipeline/answer.ts);
 * - finish: `finish`, in reverse chain order, for every stage whose `run` was called, once the
 *   response has ended (answered, refused, failed or cut) and just before the audit record.
 */
export interface Stage {
  readonly name: string
  run(ex: Exchange): Verdict | Promise<Verdict>
  /**
   * What this stage reads of the upstream's answer, declared once when the stage is built. Requests
   * that call none of these methods pay nothing for it: their answer streams through untouched.
   */
  readonly answers?: AnswerInterest
  /**
   * The upstream's status as soon as its head arrives, or why there is none: called once for every
   * forwarded request that called one of `answers.methods`, before any byte of the answer reaches the
   * client (so `ex.responseHeaders` may still change). Synchronous; must not throw; work that waits
   * (a refund in a database) is started here and never awaited.
   */
  onOutcome?(ex: Exchange, outcome: Outcome): void
  /**
   * With `answers.reads: 'messages'`: one JSON-RPC message of the answer, or a batch of them (the
   * whole body of a JSON answer, the data of one SSE event), as text. Returns the text to send: the
   * same string leaves the original bytes untouched; another string replaces them. Synchronous; must
   * not throw, but for an AnswerRefused (pipeline/answer.ts): the upstream's answer must not reach the
   * client, and the relay ends it as the upstream's failure.
   */
  onMessage?(ex: Exchange, message: string): string
  /** Releases what `run` took for this request (a concurrency slot…). Synchronous; must not throw. */
  finish?(ex: Exchange): void
}

export interface AnswerInterest {
  /** JSON-RPC methods (exact names) whose answers this stage reads. */
  readonly methods: readonly string[]
  /**
   * `outcome`: the status or the failure only, at no cost to the answer's streaming. `messages`: also
   * every JSON-RPC message of it: a JSON answer is then held whole (up to MAX_READ_ANSWER_BYTES)
   * before it is sent, an SSE answer is read event by event (each event held until it is complete),
   * and the upstream is asked for an unencoded answer.
   */
  readonly reads: 'outcome' | 'messages'
  /**
   * With `reads: 'messages'`: also every message of the server-to-client streams (a GET: the
   * standalone SSE stream, the legacy /sse stream), which answer no call of their own request.
   */
  readonly streams?: boolean
  /**
   * With `reads: 'messages'`: also reads the answer of a request that calls none of `methods` when
   * this says so, asked once when the request is admitted (a stage whose interest depends on other
   * requests in flight). Synchronous and cheap: it runs for every forwarded request.
   */
  alsoReads?(ex: Exchange): boolean
}

/** What became of a forwarded request at the upstream, as far as the gateway can tell. */
export interface Outcome {
  /** The upstream's final HTTP status; 0 when none arrived. */
  readonly status: number
  /**
   * Why no status arrived when the gateway knows: unreachable, timed out or failed before its head
   * (WL_UPSTREAM_*). Null with status 0: the client left first (the upstream may still have run it).
   */
  readonly failure: WardlineError | null
  /**
   * True once the request's bytes were written to a connection to the upstream: from then on the
   * upstream may have run it, whatever came after (a reset, no answer within upstream_timeout_seconds,
   * the client leaving). False only when it provably never reached the upstream: the client was gone
   * before it was forwarded, no connection could be made (refused, connect timeout), or the client or
   * upstream_timeout_seconds gave up while it still waited for a free connection.
   */
  readonly sent: boolean
  /** The upstream's response headers when a status arrived (the session stage reads `mcp-session-id`). */
  readonly headers?: IncomingHttpHeaders
}

/**
 * Runs the request phase; `ex.stagesRun` then says how many stages' `run` was called (for the finish
 * phase). Synchronous while the stages are: only a stage that returns a promise is awaited (reading
 * the body, a Postgres budget check), so a chain of a dozen mostly synchronous stages costs one or two
 * promises per request, not one per stage. A stage that throws makes runStages throw (or reject, once
 * it has awaited), as an async function would reject.
 */
export function runStages(stages: readonly Stage[], ex: Exchange, from = 0): Refusal | null | Promise<Refusal | null> {
  for (let i = from; i < stages.length; i++) {
    ex.stagesRun = i + 1
    const verdict = stages[i].run(ex)
    if (verdict instanceof Promise) return runRest(stages, ex, i, verdict)
    if (verdict !== CONTINUE) return verdict
  }
  return null
}

/**
 * runStages from the stage at `i`, whose verdict is still pending. A `then`, not an async function:
 * the same turns of the event loop, without the async function's own state (about 300 bytes a request).
 */
function runRest(stages: readonly Stage[], ex: Exchange, i: number, pending: Promise<Verdict>): Promise<Refusal | null> {
  return pending.then((verdict) => (verdict !== CONTINUE ? verdict : runStages(stages, ex, i + 1)))
}

/**
 * The finish phase: every stage whose `run` was called, last first. A finish that throws (it must
 * not) still lets every other stage release what it took; the first throw is rethrown after them.
 */
export function finishStages(stages: readonly Stage[], ex: Exchange): void {
  let failed = false
  let failure: unknown
  for (let i = ex.stagesRun - 1; i >= 0; i--) {
    try {
      stages[i].finish?.(ex)
    } catch (err) {
      if (!failed) failure = err
      failed = true
    }
  }
  if (failed) throw failure
  ex.stagesRun = 0
}
