import type { IncomingHttpHeaders } from 'node:http'
import { Pool, type Dispatcher } from 'undici'
import type { UpstreamConfig } from '../config/types'
import { WardlineError, describeError } from '../errors'
import { isStream } from '../mcp/streams'
import { LinkedList } from '../linked-list'
import { pushCorsHeaders } from '../pipeline/cors'
import { AnswerRefused, noteAnswerFailure, reportOutcome, rewriteMessage } from '../pipeline/answer'
import type { Exchange } from '../pipeline/exchange'
import { failureCode, setCause } from '../pipeline/reason'
import type { UpstreamFailureListener } from './failures'
import { ForwardedHeaders } from './forwarded'
import { clientResponseHeaders, upstreamRequestHeaders } from './headers'
import { SseMessages } from './sse-messages'

/**
 * Most bytes of an answer held for a stage that reads its messages: a whole JSON answer, or one SSE
 * event. A longer one is not read (502 when nothing was sent yet, else the stream is cut).
 */
export const MAX_READ_ANSWER_BYTES = 16 * 1024 * 1024

/** undici codes meaning the upstream never answered in time. */
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT'])
/** Codes meaning no connection could be made at all. */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])

/** An upstream's settings: the one `upstream:`, or a server of `servers:` with its own headers. */
export type UpstreamTarget = UpstreamConfig & { readonly headers?: Readonly<Record<string, string>> }

/**
 * The terminal stage. Responses stream straight to the client chunk by chunk, with backpressure both
 * ways; a client that leaves aborts the upstream request.
 *
 * Two undici Pools (keep-alive): GETs (the standalone SSE stream, legacy /sse) hold their connection for
 * as long as the client listens, so they get a pool of their own without a connection cap; were they
 * to share the bounded pool, a few hundred open streams would leave every POST queued forever.
 */
export class Upstream {
  private readonly pool: Pool
  private readonly streams: Pool
  /** The upstream's origin (scheme, host, port) as text: URL's `origin` getter builds a new string at each read. */
  private readonly origin: string
  private readonly basePath: string
  private readonly timeoutMs: number
  private readonly forwardedHeaders: ForwardedHeaders
  private readonly deadlines: Deadlines
  /** The server's own headers (`servers.<name>.headers`), flat [name, value, …]; client copies are dropped first. */
  private readonly ownHeaders: readonly string[]
  private readonly ownNames: ReadonlySet<string> | null

  /**
   * `trustedProxies`: peers whose X-Forwarded-* chain is extended rather than replaced (IPs, CIDRs).
   * `onFailure` hears each request the upstream failed, once (metrics and a rate-limited warning).
   */
  constructor(
    config: UpstreamTarget,
    trustedProxies: readonly string[] = [],
    private readonly onFailure: UpstreamFailureListener = () => undefined,
  ) {
    this.forwardedHeaders = new ForwardedHeaders(trustedProxies)
    const own = config.headers ?? {}
    this.ownHeaders = Object.entries(own).flat()
    this.ownNames = this.ownHeaders.length === 0 ? null : new Set(Object.keys(own))
    const url = new URL(config.url)
    this.origin = url.origin
    this.basePath = url.pathname.replace(/\/+$/, '')
    this.timeoutMs = config.timeoutSeconds * 1000
    this.deadlines = new Deadlines(this.timeoutMs)
    const options = {
      pipelining: 1,
      headersTimeout: this.timeoutMs,
      // 0: no idle-body timeout, so a quiet SSE stream (a GET stream waiting for server events) lives on.
      bodyTimeout: 0,
      connectTimeout: Math.min(10_000, this.timeoutMs),
    }
    this.pool = new Pool(this.origin, { ...options, connections: config.connections })
    this.streams = new Pool(this.origin, { ...options, connections: null })
  }

  /**
   * Resolves when the response has been relayed (or the client left). Rejects with a WardlineError
   * only while nothing has been sent to the client yet, so the caller can still answer 502/504.
   */
  forward(ex: Exchange): Promise<void> {
    // One clock read for where both upstream_timeout_seconds and wardline_forwarded_call_duration_seconds start.
    const now = performance.now()
    ex.forwardedMonoMs = now
    // The client left while a stage was running (a budget check, a JWKS fetch): nothing to forward,
    // and its 'close' came before any listener here could hear it.
    if (ex.res.destroyed) {
      clientLeft(ex)
      reportOutcome(ex, { status: 0, failure: null, sent: false })
      return Promise.resolve()
    }
    const req = ex.req
    const headers = upstreamRequestHeaders(req.rawHeaders, req.headers, this.ownNames)
    for (let i = 0; i < this.ownHeaders.length; i++) headers.push(this.ownHeaders[i])
    // A stage reads this answer's messages: ask for them unencoded (an encoded answer is refused below).
    if (ex.readsMessages) withoutHeader(headers, 'accept-encoding')
    if (ex.principal !== null) {
      headers.push('x-wardline-identity', headerSafe(ex.principal.identity), 'x-wardline-tenant', headerSafe(ex.principal.tenant))
    }
    headers.push('x-wardline-request-id', ex.requestId)
    this.forwardedHeaders.push(req, headers)
    return new Promise((resolve, reject) => {
      const handler = new RelayHandler(ex, resolve, reject, this.deadlines, this.onFailure, now)
      ;(isStream(ex) ? this.streams : this.pool).dispatch(
        {
          origin: this.origin,
          path: ex.upstreamPath ?? this.basePath + (req.url ?? '/'),
          method: req.method as Dispatcher.HttpMethod,
          headers,
          body: ex.body,
        },
        handler,
      )
    })
  }

  async destroy(): Promise<void> {
    this.deadlines.stop()
    await Promise.all([this.pool.destroy(), this.streams.destroy()])
  }
}

/**
 * Header values are Latin-1 on the wire, so identities and tenants (any Unicode) travel
 * percent-encoded as UTF-8 (RFC 3986 §2.1). Printable ASCII other than `%` stays as it is, so
 * `decodeURIComponent` on the upstream side gives back every identity exactly.
 */
export function headerSafe(value: string): string {
  return /[^\x20-\x24\x26-\x7e]/.test(value) ? value.replace(/[^\x20-\x24\x26-\x7e]+/g, encodeURIComponent) : value
}

class RelayHandler implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | null = null
  /**
   * The request's bytes were handed to a connected socket to the upstream: from then on the upstream
   * may have read and run it, whatever follows (a reset, no answer in time). See onRequestStart.
   */
  private written = false
  private started = false
  private settled = false
  /**
   * A sized response's status and headers, held until its first body bytes (or its end): Node then
   * sends head and body in one write, and an upstream that dies in between still gets the client an
   * honest 502 instead of a 200 head and a reset.
   */
  private heldStatus = 0
  private heldHeaders: string[] | null = null
  /** For a stage that reads the answer's messages: the JSON answer's chunks so far, or the SSE reader. */
  private jsonChunks: Buffer[] | null = null
  private jsonBytes = 0
  private sse: SseMessages | null = null
  /**
   * upstream_timeout_seconds counts from the moment the request is handed to the pool: undici's own
   * headersTimeout starts only once a connection is free, so a request queued behind a saturated pool
   * would otherwise wait without bound. The handler waits in `deadlines` until its response starts.
   */
  deadlineAt = 0
  /** Links of the Deadlines queue; null when not on it. */
  listPrev: RelayHandler | null = null
  listNext: RelayHandler | null = null

  constructor(
    private readonly ex: Exchange,
    private readonly resolve: () => void,
    private readonly reject: (err: Error) => void,
    private readonly deadlines: Deadlines,
    private readonly onFailure: UpstreamFailureListener,
    /** performance.now() when the request was handed over (Upstream.forward). */
    handedMonoMs: number,
  ) {
    ex.res.on('close', this.onClientClose)
    deadlines.add(this, handedMonoMs)
  }

  /**
   * undici calls this on a connected socket, synchronously before it writes the request to it
   * (client-h1.js writeH1: onConnect, then writeBuffer in the same turn); an abort here writes
   * nothing. A request whose connection could not be made (refused, connect timeout) never gets
   * here, nor one still queued for a free connection.
   */
  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.ex.res.destroyed) controller.abort(new Error('client closed the connection'))
    else if (this.settled) controller.abort(new Error('gave up before a connection was free'))
    else this.written = true
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200 || this.settled) return // 1xx informational: the final response follows
    this.deadlines.remove(this)
    this.started = true
    if (this.ex.answerReaders !== null) {
      reportOutcome(this.ex, { status: statusCode, failure: null, sent: true, headers })
      if (this.ex.answerFailure !== null) return this.stageFailed()
      if (this.ex.readsMessages && !this.readMessages(headers)) return
    }
    const res = this.ex.res
    const extra = this.ex.responseHeaders
    const cors = this.ex.corsOrigin
    const out = clientResponseHeaders(headers, extra, cors !== null)
    if (extra !== null) for (const name in extra) out.push(name, extra[name])
    if (cors !== null) pushCorsHeaders(out, cors)
    out.push('x-wardline-request-id', this.ex.requestId)
    // A body a stage reads may be rewritten: a held JSON answer gets its length once it is known, an
    // SSE answer goes without one.
    if (this.jsonChunks !== null || this.sse !== null) withoutHeader(out, 'content-length')
    // SSE (no content-length): send the headers now rather than with the first event, which may be
    // minutes away. A sized body follows at once: flushing its head separately cost a second socket
    // write per response (12% of the gateway's sampled time). A JSON answer a stage reads is held.
    if (this.jsonChunks === null && (headers['content-length'] === undefined || this.sse !== null)) {
      this.writeHead(statusCode, out)
      res.flushHeaders()
    } else {
      this.heldStatus = statusCode
      this.heldHeaders = out
    }
  }

  private writeHead(status: number, headers: string[]): void {
    this.ex.status = status
    this.ex.res.writeHead(status, headers)
  }

  private writeHeldHead(): void {
    if (this.heldHeaders === null) return
    this.writeHead(this.heldStatus, this.heldHeaders)
    this.heldHeaders = null
  }

  /**
   * A stage reads this answer's messages: a JSON answer is held whole, an SSE one read event by event;
   * anything else passes as it is. False (and the request failed) when the answer cannot be read.
   */
  private readMessages(headers: IncomingHttpHeaders): boolean {
    const encoding = headers['content-encoding']
    if (encoding !== undefined && encoding !== 'identity') {
      this.unreadable(`the answer is content-encoded (${String(encoding)}) and a stage must read it`)
      return false
    }
    const type = String(headers['content-type'] ?? '').toLowerCase()
    if (type.startsWith('application/json')) this.jsonChunks = []
    // A GET stream is read as SSE whatever it says it is: the official client parses any GET body as SSE.
    else if (type.startsWith('text/event-stream') || this.ex.req.method === 'GET') {
      this.sse = new SseMessages((data) => rewriteMessage(this.ex, data), MAX_READ_ANSWER_BYTES)
    }
    return true
  }

  /**
   * The relay of a read answer threw: a stage's failure (noted on the exchange), a reader refusing
   * the upstream's answer (AnswerRefused), or the answer could not be read (an event too long).
   */
  private readFailed(err: unknown): void {
    if (this.ex.answerFailure !== null) return this.stageFailed()
    if (err instanceof AnswerRefused) return this.unreadable(err.message, 'upstream answer refused')
    this.unreadable((err as Error).message)
  }

  /** An answer a stage must read but cannot: 502 while nothing was sent, else the stream is cut. */
  private unreadable(why: string, what = 'upstream answer not readable'): void {
    const err = new WardlineError('WL_UPSTREAM_FAILED', `${what}: ${why}`)
    // Settle first: the abort below reports back through onResponseError, which must not win.
    this.giveUp(err, err.message)
    this.controller?.abort(err)
  }

  /**
   * The answer cannot go on. While nothing reached the client (not even a held head) the gateway can
   * still answer for it (`failure`: 502/504); once the head is out, the stream is cut and the audit
   * says why (`cutReason`).
   */
  private giveUp(failure: WardlineError, cutReason: string): void {
    // Counting the failure (a metric) must not stop the request from being answered: this runs in the
    // deadline timer and in undici's callbacks. A count that throws makes the request `internal`.
    try {
      this.onFailure(failure)
    } catch (err) {
      noteAnswerFailure(this.ex, err)
    }
    if (!this.ex.res.headersSent) {
      this.heldHeaders = null
      this.jsonChunks = null
      return this.fail(failure)
    }
    this.ex.aborted = true
    this.ex.decision = 'error'
    // Leads the reason, as a failure answered before the head does; a note made earlier (a budget
    // check that failed open) stays after it.
    setCause(this.ex, failureCode(failure.code), cutReason, true)
    this.ex.res.destroy()
    this.finish()
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return
    if (this.jsonChunks !== null) {
      this.jsonBytes += chunk.length
      if (this.jsonBytes > MAX_READ_ANSWER_BYTES) return this.unreadable(`a JSON answer passed ${MAX_READ_ANSWER_BYTES} bytes`)
      this.jsonChunks.push(chunk)
      return
    }
    if (this.sse !== null) {
      try {
        chunk = this.sse.push(chunk)
      } catch (err) {
        return this.readFailed(err)
      }
      if (chunk.length === 0) return
    }
    this.writeHeldHead()
    if (!this.ex.res.write(chunk)) {
      controller.pause()
      this.ex.res.once('drain', this.onDrain)
    }
  }

  onResponseEnd(): void {
    if (this.settled) return
    if (this.jsonChunks !== null) return this.endJson(this.jsonChunks)
    let rest: Buffer | null | undefined
    try {
      rest = this.sse?.end()
    } catch (err) {
      return this.readFailed(err)
    }
    this.writeHeldHead()
    if (rest) this.ex.res.write(rest)
    this.ex.res.end()
    this.finish()
  }

  /** A held JSON answer: its reader(s) may rewrite it; unchanged text keeps the original bytes. */
  private endJson(chunks: Buffer[]): void {
    this.jsonChunks = null
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)
    const text = body.toString('utf8')
    let rewritten: string
    try {
      rewritten = rewriteMessage(this.ex, text)
    } catch (err) {
      return this.readFailed(err)
    }
    const bytes = rewritten === text ? body : Buffer.from(rewritten, 'utf8')
    this.heldHeaders?.push('content-length', String(bytes.length))
    this.writeHeldHead()
    this.ex.res.end(bytes)
    this.finish()
  }

  /**
   * A stage threw reading the answer (ex.answerFailure): not the upstream's failure, so not counted as
   * one. While nothing reached the client the gateway answers 500 for it; once the head is out the
   * stream is cut. Either way the gateway audits the request once as `internal` (Gateway.handle).
   */
  private stageFailed(): void {
    if (this.settled) return
    this.heldHeaders = null
    this.jsonChunks = null
    this.settled = true
    this.detach()
    if (this.ex.res.headersSent) {
      this.ex.aborted = true
      this.ex.res.destroy()
      this.resolve()
    } else this.reject(this.ex.answerFailure ?? new Error('a stage failed reading the answer'))
    this.controller?.abort(new Error('a stage failed reading the answer'))
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    if (this.settled) return // the gateway gave up first (deadline, unreadable answer): it already answered
    if (this.ex.aborted) return this.finish() // our own abort after the client left
    this.giveUp(classify(err), `upstream response broke off: ${describeError(err)}`)
  }

  private readonly onDrain = (): void => {
    this.controller?.resume()
  }

  private readonly onClientClose = (): void => {
    if (this.settled || this.ex.res.writableFinished) return
    clientLeft(this.ex)
    if (!this.started) reportOutcome(this.ex, { status: 0, failure: null, sent: this.written })
    this.controller?.abort(new Error('client closed the connection'))
    this.finish()
  }

  /** upstream_timeout_seconds passed before the response headers (called by `expire`). */
  onDeadline(): void {
    if (this.started) return
    // Settle first: the abort below reports back through onResponseError, which must not win as a 502.
    // Before the response headers nothing reached the client: giveUp answers 504 (and reports the failure).
    this.giveUp(new WardlineError('WL_UPSTREAM_TIMEOUT', 'upstream sent no response headers in time'), 'upstream_timeout_seconds passed')
    this.controller?.abort(new Error('upstream_timeout_seconds passed'))
  }

  private fail(err: WardlineError): void {
    if (this.settled) return
    // Nothing of an answer reached the client: the readers hear why (unless a status already arrived),
    // and whether the upstream may have run the request all the same.
    reportOutcome(this.ex, { status: 0, failure: err, sent: this.written })
    this.settled = true
    this.detach()
    this.reject(err)
  }

  private finish(): void {
    if (this.settled) return
    this.settled = true
    this.detach()
    this.resolve()
  }

  private detach(): void {
    this.deadlines.remove(this)
    this.ex.res.off('close', this.onClientClose)
    this.ex.res.off('drain', this.onDrain)
  }
}

/** The audit reason of a request whose client left before its answer ended. */
export const CLIENT_CLOSED = 'client closed the connection'

/** The audit reason of a request whose connection shutdown closed once shutdown_grace_seconds had passed. */
export const CUT_AT_SHUTDOWN = 'connection closed by the gateway at shutdown (shutdown_grace_seconds passed)'

/** Removes every `name` (lower-case) from a flat [name, value, …] header list. */
function withoutHeader(headers: string[], name: string): void {
  for (let i = headers.length - 2; i >= 0; i -= 2) {
    if (headers[i].toLowerCase() === name) headers.splice(i, 2)
  }
}

/**
 * The connection closed before the answer ended: the client left, or shutdown closed it past its
 * grace period (the gateway marked the request first, Gateway.cutRemaining), which is then the cause.
 */
function clientLeft(ex: Exchange): void {
  ex.aborted = true
  if (ex.reasonCode === null) {
    if (ex.cutAtShutdown) setCause(ex, 'shutdown.cut', CUT_AT_SHUTDOWN)
    else setCause(ex, 'client.closed', CLIENT_CLOSED)
  }
  if (ex.status === 0) ex.status = 499 // nginx's "client closed request": nothing was answered
}

/**
 * The requests waiting for their response to start, oldest first, behind one timer. Every request of
 * an Upstream has the same timeout, so deadlines come in the order requests are added: the timer only
 * ever needs the oldest's. A timer per request (a Timeout object, inserted into and removed from Node's
 * timer lists) cost more than the rest of this put together; here a request costs a push and a remove.
 */
class Deadlines {
  private readonly waiting = new LinkedList<RelayHandler>()
  private timer: NodeJS.Timeout | null = null

  constructor(private readonly timeoutMs: number) {}

  add(handler: RelayHandler, nowMonoMs: number): void {
    handler.deadlineAt = nowMonoMs + this.timeoutMs
    this.waiting.push(handler)
    // An armed timer fires for an older deadline and re-arms for this one if it is still waiting.
    if (this.timer === null) this.arm(this.timeoutMs)
  }

  remove(handler: RelayHandler): void {
    this.waiting.remove(handler)
  }

  /** At shutdown: nothing fires any more. */
  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
  }

  private arm(ms: number): void {
    // Unref'd: requests in flight keep the process alive through their sockets; a timer left armed
    // after the last one finished must not.
    this.timer = setTimeout(this.expire, ms).unref()
  }

  private readonly expire = (): void => {
    this.timer = null
    const now = performance.now()
    for (let h = this.waiting.oldest; h !== null && h.deadlineAt <= now; h = this.waiting.oldest) {
      this.waiting.remove(h)
      h.onDeadline()
    }
    const next = this.waiting.oldest
    if (next !== null) this.arm(Math.max(1, next.deadlineAt - now))
  }
}

function classify(err: Error): WardlineError {
  const code = (err as { code?: string }).code ?? ''
  if (TIMEOUT_CODES.has(code)) return new WardlineError('WL_UPSTREAM_TIMEOUT', 'upstream sent no response headers in time', { cause: err })
  if (UNREACHABLE_CODES.has(code) || (err as { errors?: unknown }).errors) {
    return new WardlineError('WL_UPSTREAM_UNREACHABLE', 'upstream unreachable', { cause: err })
  }
  return new WardlineError('WL_UPSTREAM_FAILED', 'upstream failed before answering', { cause: err })
}
