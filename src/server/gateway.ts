import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AuditEntry } from '../audit/entry'
import type { ServerSeries } from '../audit/metrics'
import type { AuditTrail } from '../audit/trail'
import type { ToolRefusals } from '../config/types'
import { WardlineError, describeError } from '../errors'
import { refusalResultMessage, resultFormat, writeResult } from '../jsonrpc/refusal-result'
import { writeLocalBody, writeRpcError } from '../pipeline/reply'
import type { Logger } from '../log'
import { setCorsHeaders } from '../pipeline/cors'
import { LinkedList } from '../linked-list'
import { Exchange } from '../pipeline/exchange'
import { AnswerPlan } from '../pipeline/answer'
import { NOTE, addNote, failureCode, setCause } from '../pipeline/reason'
import { type Refusal, type Stage, finishStages, runStages } from '../pipeline/stage'
import { CUT_AT_SHUTDOWN } from '../upstream/forward'
import type { LegacyStreams } from '../upstream/legacy-streams'
import { DEFAULT_LINGER, type LingerBounds, lingerOnBody } from './linger'
import { requestId } from '../request-id'

/** A stage chain, the answer plan made from it and how its refusals are answered, swapped together at a reload. */
interface Chain {
  readonly stages: readonly Stage[]
  readonly answers: AnswerPlan
  readonly toolRefusals: ToolRefusals
}

function chainOf(stages: readonly Stage[], toolRefusals: ToolRefusals): Chain {
  return { stages, answers: new AnswerPlan(stages), toolRefusals }
}

/**
 * What the listener hands each proxied request to, and what shutdown drains: one route's Gateway, or
 * the Router in front of several (server/router.ts).
 */
export interface Dispatch {
  /** Never rejects: every request is answered and audited once. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<void>
  /** Requests not yet audited. */
  readonly inFlight: number
  drain(): void
  cutRemaining(): void
}

/** Where a route's requests go once every stage has passed them: its upstream server. */
export interface Forwarder {
  forward(ex: Exchange): Promise<void>
}

/**
 * Runs one proxied request through the phases (pipeline/stage.ts): the request stages, then the
 * upstream (with the answer phase) or a local answer, then the finish phase and exactly one audit record.
 */
export class Gateway implements Dispatch {
  /** Requests between arrival and their audit record (a linked list, not a Set: see linked-list.ts). */
  private readonly running = new LinkedList<Exchange>()
  /** The chain new requests run through; a reload swaps it whole. */
  private chain: Chain

  /** Requests not yet audited; shutdown waits for this to reach 0. */
  get inFlight(): number {
    return this.running.size
  }

  /**
   * Shutdown: responses not yet started carry `Connection: close`, so no client sends another request
   * on a connection about to go (lifecycle.ts does the same for requests that arrive from now on).
   */
  drain(): void {
    this.running.forEach((ex) => {
      if (!ex.res.headersSent) ex.res.shouldKeepAlive = false
    })
  }

  /**
   * Shutdown, once the grace period is over: marks every request still running as cut by the gateway
   * (the caller then closes their connections), so each audit entry says who ended it.
   */
  cutRemaining(): void {
    this.running.forEach((ex) => {
      if (!ex.aborted) ex.cutAtShutdown = true
    })
  }

  constructor(
    stages: readonly Stage[],
    private readonly upstream: Forwarder,
    private readonly audit: AuditTrail,
    private readonly log: Logger,
    toolRefusals: ToolRefusals = 'http',
    /** Open legacy /sse streams (server/chain.ts): where a refused legacy POST's tool result goes. */
    private readonly legacyStreams: LegacyStreams | null = null,
    /** How much of a body still arriving is read after an early answer (linger.ts). */
    private readonly linger: LingerBounds = DEFAULT_LINGER,
    /** The name of the server this route reaches (`servers:`); null with `upstream:` alone. */
    readonly server: string | null = null,
    /** Whose session ids its requests present: its upstream's origin (Exchange.sessionScope); null with `upstream:` alone. */
    private readonly sessionScope: string | null = null,
    /** The request metrics its requests count in (the server's, taken once per route); the unlabelled ones by default. */
    private readonly series?: ServerSeries,
  ) {
    this.chain = chainOf(stages, toolRefusals)
  }

  /** Swaps the stage chain (a config reload); requests already running keep the chain they started with. */
  replaceStages(stages: readonly Stage[], toolRefusals: ToolRefusals): void {
    this.chain = chainOf(stages, toolRefusals)
  }

  /**
   * Never rejects: a throw anywhere (a stage, the relay, a finish hook, a metric, building the audit
   * entry) answers this request 500 when nothing was sent yet, else ends its response, and the request
   * still gets exactly one audit entry (`reason_code` `internal`); every other request goes on.
   */
  readonly handle = async (req: IncomingMessage, res: ServerResponse, upstreamPath: string | null = null): Promise<void> => {
    const ex = new Exchange(req, res, requestId(), Date.now(), performance.now())
    ex.server = this.server
    ex.sessionScope = this.sessionScope
    ex.upstreamPath = upstreamPath
    const chain = this.chain
    this.running.push(ex)
    try {
      const verdict = runStages(chain.stages, ex)
      const refusal = verdict instanceof Promise ? await verdict : verdict
      if (refusal !== null) refuse(ex, refusal, chain.toolRefusals, this.legacyStreams, this.linger)
      else {
        chain.answers.attach(ex)
        ex.forwarded = true // from here the request may run upstream: audited per batch element
        await this.upstream.forward(ex)
      }
    } catch (err) {
      // A stage that threw reading the answer is the cause, not what the relay made of it.
      this.failed(ex, ex.answerFailure ?? err)
    } finally {
      this.settle(ex, chain)
    }
  }

  /**
   * Every path (refused, failed, client gone, stream closed) ends here, once: the stages release what
   * they took, then the request is audited. A throw in either still leaves one audit entry, marked
   * `internal`, and every stage's finish is called (pipeline/stage.ts finishStages).
   */
  private settle(ex: Exchange, chain: Chain): void {
    // Cut at shutdown after something else ended it (a stream that broke): that cause keeps its code,
    // and the reason adds who closed the connection. A cut the relay saw as the cause has its own code.
    if (ex.cutAtShutdown && ex.aborted && ex.reasonCode !== 'shutdown.cut') addNote(ex, NOTE.shutdownCut, CUT_AT_SHUTDOWN)
    this.running.remove(ex)
    // A stage threw in the answer phase after which the relay went on (an outcome reader) or the
    // client had left: the request is a failure all the same, audited as `internal`.
    if (ex.answerFailure !== null && ex.reasonCode !== 'internal') this.failed(ex, ex.answerFailure)
    try {
      finishStages(chain.stages, ex)
    } catch (err) {
      this.failed(ex, err)
    }
    let entries: AuditEntry[]
    try {
      entries = this.audit.entriesOf(ex, this.series)
    } catch (err) {
      this.failed(ex, err)
      entries = this.audit.entriesAfterFailure(ex)
    }
    try {
      this.audit.write(ex, entries)
    } catch (err) {
      this.log.error('audit entry not written', { request_id: ex.requestId, error: describeError(err) })
    }
  }

  /**
   * A failure: answered with its status while nothing was sent, else the response is ended where it
   * stands (a truncated body must not pass for a whole one). Never throws: this is the path of last resort.
   */
  private failed(ex: Exchange, err: unknown): void {
    try {
      this.replyWithError(ex, err)
    } catch (again) {
      this.log.error('could not answer a request that failed', { request_id: ex.requestId, error: describeError(again) })
      ex.res.destroy()
    }
  }

  private replyWithError(ex: Exchange, err: unknown): void {
    const known = err instanceof WardlineError
    const sent = ex.res.headersSent
    // Once the head is out the status stays what the client got; a failure before it answers 500 (or its own).
    const status = sent ? ex.status : known ? err.status : 500
    ex.decision = 'error'
    ex.status = status
    // The code leads the reason once; describeError(err) would repeat it after the message.
    const cause = err instanceof Error && err.cause !== undefined ? `: ${describeError(err.cause)}` : ''
    const failure = known ? `${err.code}: ${err.message}${cause}` : `WL_INTERNAL: ${describeError(err)}`
    // What the request's reason already says stays after it (a budget check that failed open, a refund).
    setCause(ex, known ? failureCode(err.code) : 'internal', failure, true)
    if (!known)
      this.log.error('unexpected error while handling a request', {
        request_id: ex.requestId,
        error: describeError(err),
        stack: (err as Error)?.stack,
      })
    if (sent) {
      if (!ex.res.writableEnded) ex.res.destroy()
      return
    }
    setLocalAnswerHeaders(ex)
    let headers: Record<string, string> | undefined = status === 503 ? { 'retry-after': '1' } : undefined
    // Failed before the body was all read (a stage that threw): the same staged close as a refusal.
    if (!ex.req.complete && !ex.res.headersSent) {
      headers = { ...headers, connection: 'close' }
      lingerOnBody(ex.req, this.linger)
    }
    writeRpcError(ex.res, status, ex.replyId, status, MESSAGES[status] ?? 'Internal error', undefined, headers)
  }
}

const MESSAGES: Record<number, string> = {
  500: 'Internal error',
  502: 'Bad gateway: the MCP server could not be reached',
  503: 'Service unavailable',
  504: 'Gateway timeout: the MCP server did not answer in time',
}

export function refuse(
  ex: Exchange,
  refusal: Refusal,
  toolRefusals: ToolRefusals = 'http',
  legacy: LegacyStreams | null = null,
  linger: LingerBounds = DEFAULT_LINGER,
): void {
  setLocalAnswerHeaders(ex)
  ex.decision = refusal.decision
  ex.status = refusal.status
  // A body read cut short because shutdown closed the connection: the gateway closed it, not the client.
  if (ex.cutAtShutdown && refusal.code === 'client.closed') setCause(ex, 'shutdown.cut', CUT_AT_SHUTDOWN)
  // The refusal's reason leads; a note made before it (a budget check that failed open) follows.
  else setCause(ex, refusal.code, refusal.reason, true)
  const id = refusal.id !== undefined ? refusal.id : ex.replyId
  // Refused before its body was all read (a 401, a 413 on its declared length): close rather than let
  // Node drain a body of any size from a caller nobody has authenticated, but read the rest of it
  // within bounds first, so that the client still sending it reads this answer (linger.ts).
  let headers = refusal.headers
  if (!ex.req.complete) {
    headers = { ...headers, connection: 'close' }
    lingerOnBody(ex.req, linger)
  }
  if (refusal.noBody) return writeEmpty(ex, refusal.status, headers)
  // JSON-RPC 2.0 §4.1: a notification is never answered, so a refused one (a tools/call sent without
  // an id) gets no body. Its status is the refusal's all the same, not a 202: MCP 2025-06-18, Streamable
  // HTTP, "Sending Messages to the Server": a server that does not accept a notification MUST answer
  // an HTTP error status, and a 202 would tell the client it was taken.
  if (onlyNotifications(ex)) return writeEmpty(ex, refusal.status, headers)
  if (toolRefusals === 'result' && answerAsResult(ex, refusal, headers, legacy)) return
  writeRpcError(ex.res, refusal.status, id, refusal.rpcCode ?? refusal.status, refusal.message, refusal.data, headers)
}

/**
 * `tool_refusals: result`: answers a refused single tools/call as a tool result (HTTP 200, JSON or SSE
 * as the client accepts) with the refusal's headers (Retry-After, RateLimit fields) kept. False when
 * the refusal or the request cannot be answered so (see refusal-result.ts): the caller then sends the
 * HTTP error. The audit entry keeps the decision and reason; its status is the 200 that was sent.
 */
function answerAsResult(
  ex: Exchange,
  refusal: Refusal,
  headers: Readonly<Record<string, string>> | undefined,
  legacy: LegacyStreams | null,
): boolean {
  const message = refusalResultMessage(ex, refusal)
  if (message === null) return false
  const format = resultFormat(ex.req.headers.accept)
  if (format === null) return legacy !== null && answerOnLegacyStream(ex, message, headers, legacy)
  ex.status = 200
  writeResult(ex.res, message, format, headers)
  return true
}

/**
 * The legacy HTTP+SSE transport: its POST /messages?sessionId=… is answered 202 and the result goes
 * on the session's /sse stream, as the server would send its own answer. Only when that stream runs
 * through this process for the same caller (LegacyStreams.deliver); otherwise the HTTP error.
 */
function answerOnLegacyStream(
  ex: Exchange,
  message: string,
  headers: Readonly<Record<string, string>> | undefined,
  legacy: LegacyStreams,
): boolean {
  if (ex.req.headers['mcp-session-id'] !== undefined) return false
  const sessionId = ex.sessionId
  if (sessionId === '' || !legacy.deliver(sessionId, ex, message)) return false
  ex.status = 202
  writeLocalBody(ex.res, 202, 'text/plain', 'Accepted', headers)
  return true
}

/**
 * What every local answer carries: the caller's handle on this request in the audit trail (as on
 * forwarded ones), and the CORS headers when the request came from a listed browser origin.
 */
function setLocalAnswerHeaders(ex: Exchange): void {
  ex.res.setHeader('x-wardline-request-id', ex.requestId)
  if (ex.corsOrigin !== null) setCorsHeaders(ex.res, ex.corsOrigin)
}

/** True when the body held only notifications (requests without an id): nothing may be answered. */
function onlyNotifications(ex: Exchange): boolean {
  const calls = ex.calls
  if (calls.length === 0) return false
  for (let i = 0; i < calls.length; i++) if (calls[i].id !== undefined || calls[i].method === '') return false
  return true
}

/** A local answer with status and headers only (a preflight's 204): no body, no Content-Type, no Mcp-Session-Id. */
function writeEmpty(ex: Exchange, status: number, headers: Readonly<Record<string, string>> | undefined): void {
  ex.res.statusCode = status
  if (headers) for (const name in headers) ex.res.setHeader(name, headers[name])
  ex.res.end()
}
