import { createHash, randomUUID, timingSafeEqual } from 'node:crypto'
import { type IncomingMessage, type Server, type ServerOptions, type ServerResponse, createServer } from 'node:http'
import { type Server as HttpsServer, createServer as createHttpsServer } from 'node:https'
import { type AuditEntry, isoTimestamp } from '../audit/entry'
import type { AuditTrail } from '../audit/trail'
import type { AdminConfig, Config } from '../config/types'
import { describeError } from '../errors'
import type { Logger } from '../log'
import { boundAddress, listenOrExplain } from '../net/listen'
import { type TlsMaterial, logCertificate, reloadTls } from '../net/tls'
import { hasControlCharacters } from '../pipeline/exchange'
import type { ReasonCode } from '../pipeline/reason'

/** A store or list failure (the database down) in a route, with the target it was acting on, for the audit entry. */
export class AdminStoreFailure extends Error {
  constructor(
    readonly failure: unknown,
    readonly target: string,
  ) {
    super(describeError(failure))
  }
}

/** Runs a store or list call of a route: a failure keeps the route's target (who was being revoked or reset). */
export function onTarget<T>(target: string, work: Promise<T>): Promise<T> {
  return work.catch((err: unknown) => {
    throw new AdminStoreFailure(err, target)
  })
}

/** A request to the admin API as a route sees it: validated method and path, the query, the JSON body. */
export interface AdminRequest {
  readonly query: URLSearchParams
  /** The parsed JSON body (POST only); undefined for other methods. */
  readonly body: unknown
}

/** A route's answer: status and JSON body, and for the audit entry the target it acted on and a reason. */
export interface AdminAnswer {
  readonly status: number
  readonly body: unknown
  /** What the call was about (`identity=alice tenant=acme`), the entry's `tool` field. */
  readonly target?: string
  /** For operators reading the trail: what was done or why it was refused. */
  readonly reason?: string
}

export type AdminHandler = (req: AdminRequest) => Promise<AdminAnswer>

/** Path → method → the action's name (the audit method is `admin/<name>`) and its handler. */
export type AdminRoutes = Readonly<Record<string, Readonly<Record<string, { readonly name: string; readonly run: AdminHandler }>>>>

/** Largest request body accepted (a revocation is well under 2 KiB: identity and tenant of 256 bytes, a reason of 1,024 characters). */
export const MAX_ADMIN_BODY_BYTES = 16 * 1024

/**
 * Receiving a whole request (headers and body) may take this long, headers alone less: a client that
 * trickles bytes is cut off instead of holding a socket and a body buffer.
 */
const REQUEST_TIMEOUT_MS = 10_000
const HEADERS_TIMEOUT_MS = 5_000

/** Longest operator hint (X-Wardline-Operator) kept in the audit identity. */
const MAX_OPERATOR_CHARS = 64

/** An answer made while a route was looked up or a body read: a precise client error. */
class AdminRefusal extends Error {
  constructor(
    readonly status: number,
    /** The audit entry's reason_code. */
    readonly code: ReasonCode,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message)
  }
}

/**
 * The admin API's own HTTP listener (admin.listen): the routes exist only here, never on the gateway's
 * listener. Every call needs `Authorization: Bearer <admin.token>`, compared in constant time over
 * SHA-256 digests (equal lengths whatever the caller sends, so neither the token's length nor a
 * prefix leaks through timing), and writes exactly one audit entry (method `admin/<action>`), whether
 * it was allowed, refused or malformed. An action with an effect runs only once its entry's queue
 * slot is held, so no admin action goes unaudited.
 */
export class AdminServer {
  readonly server: Server
  private readonly tokenDigest: Buffer
  /** Calls being answered: close() waits for them. */
  private readonly running = new Set<Promise<void>>()
  private closing: Promise<void> | null = null

  private constructor(
    private readonly config: AdminConfig,
    private readonly routes: AdminRoutes,
    private readonly audit: AuditTrail,
    private readonly log: Logger,
    private readonly tls: TlsMaterial | null,
  ) {
    this.tokenDigest = digest(config.token)
    const options: ServerOptions = {
      requestTimeout: REQUEST_TIMEOUT_MS,
      headersTimeout: HEADERS_TIMEOUT_MS,
      keepAliveTimeout: 5_000,
      connectionsCheckingInterval: 1_000,
    }
    const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
      const call: Promise<void> = this.handle(req, res)
        .catch((err: unknown) => {
          log.error('admin API call failed unexpectedly', { error: describeError(err) })
        })
        .finally(() => this.running.delete(call))
      this.running.add(call)
    }
    this.server =
      tls === null
        ? createServer(options, onRequest)
        : createHttpsServer({ ...options, ...tls.context, handshakeTimeout: HEADERS_TIMEOUT_MS }, onRequest)
  }

  /**
   * Listens on admin.listen; a port it cannot bind stops startup with WL_LISTEN_FAILED naming the key
   * (and the ${VAR} it came from, which `config`, the loaded file's Config, knows), as the main listener does.
   */
  static async start(
    settings: AdminConfig,
    config: Config,
    routes: AdminRoutes,
    audit: AuditTrail,
    log: Logger,
    tls: TlsMaterial | null = null,
  ): Promise<AdminServer> {
    const admin = new AdminServer(settings, routes, audit, log, tls)
    await listenOrExplain(admin.server, settings.listen, 'admin.listen', config)
    admin.server.on('error', (err) => log.error('admin listener error', { error: describeError(err) }))
    if (tls !== null) logCertificate(log, 'admin.tls', tls)
    log.info('admin API listening', { admin_listen: admin.address(), tls: tls === null ? 'off' : 'on' })
    return admin
  }

  /** SIGHUP: re-reads admin.tls's files (net/tls.ts reloadTls); false when they are kept or there is no TLS. */
  reloadCertificates(): boolean {
    if (this.tls === null || this.config.tls === null) return false
    return reloadTls(this.server as unknown as HttpsServer, this.config.tls, 'admin.tls', this.log)
  }

  /** host:port it listens on (the real port when admin.listen asked for 0). */
  address(): string {
    return boundAddress(this.server)
  }

  get url(): string {
    return `${this.tls === null ? 'http' : 'https'}://${this.address()}`
  }

  /**
   * Stops accepting, ends every connection, idle or not, and waits for the calls still running (each
   * bounded by its store's timeout) so their audit entries are recorded before the trail is flushed.
   * Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const closed = new Promise<void>((resolve) => this.server.close(() => resolve()))
      this.server.closeAllConnections()
      await closed
      while (this.running.size > 0) await Promise.all([...this.running])
    })()
    return this.closing
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now()
    const startedAt = Date.now()
    const method = req.method ?? ''
    const rawPath = (req.url ?? '').split('?')[0]
    const route = this.routes[rawPath]
    const action = route?.[method]
    let name = action?.name ?? 'unknown'
    let identity = ''
    let answer: AdminAnswer
    let reserved: 0 | 1 = 0
    let decision: AuditEntry['decision'] = 'error'
    let code: ReasonCode | null = null
    try {
      if (!this.authorized(req)) {
        decision = 'unauthorized'
        const bad = req.headers.authorization !== undefined
        throw new AdminRefusal(
          401,
          bad ? 'auth.invalid_token' : 'auth.missing_token',
          bad ? 'the admin token is not valid' : 'an admin token is required (Authorization: Bearer <admin.token>)',
          {
            'www-authenticate': bad ? 'Bearer realm="wardline-admin", error="invalid_token"' : 'Bearer realm="wardline-admin"',
          },
        )
      }
      identity = operatorOf(req)
      if (route === undefined)
        throw new AdminRefusal(404, 'http.path', `no admin route ${describePath(rawPath)} (routes: ${Object.keys(this.routes).join(', ')})`)
      if (action === undefined) {
        const allowed = Object.keys(route).join(', ')
        throw new AdminRefusal(
          405,
          'http.method',
          `${describePath(rawPath)} does not take ${describeMethod(method)} (allowed: ${allowed})`,
          {
            allow: allowed,
          },
        )
      }
      name = action.name
      const url = new URL(req.url ?? '/', 'http://admin')
      const body = await readBody(req, method === 'POST')
      if (!this.audit.reserveOne()) {
        throw new AdminRefusal(503, 'audit.backpressure', 'the audit trail is full: no admin action runs unaudited; try again shortly')
      }
      reserved = 1
      answer = await action.run({ query: url.searchParams, body })
      decision = answer.status < 400 ? 'allow' : 'error'
      // A route's own client errors (a body naming no bucket, a revocation to lift that is not there).
      if (answer.status >= 400) code = 'admin.invalid_request'
    } catch (err) {
      if (err instanceof AdminRefusal) {
        code = err.code
        answer = { status: err.status, body: { error: err.message }, reason: err.message }
        for (const [k, v] of Object.entries(err.headers)) res.setHeader(k, v)
      } else {
        // A store or list failure (the database down): the operator gets the cause, the process goes on.
        const cause = err instanceof AdminStoreFailure ? err.failure : err
        code = err instanceof AdminStoreFailure ? 'admin.store_failed' : 'internal'
        const message = `admin.${name} failed: ${describeError(cause)}`
        this.log.warn('admin API call failed', { action: name, error: describeError(cause) })
        answer = {
          status: 503,
          body: { error: message },
          reason: message,
          ...(err instanceof AdminStoreFailure ? { target: err.target } : {}),
        }
      }
    }
    // A body left unread (a refusal before it, or one too large) would be taken for the next request.
    if (!req.readableEnded) res.shouldKeepAlive = false
    send(res, answer.status, answer.body)
    this.audit.recordEntry(
      {
        timestamp: isoTimestamp(startedAt),
        request_id: randomUUID(),
        identity,
        tenant: '',
        method: `admin/${name}`,
        tool: answer.target ?? '',
        decision,
        status: answer.status,
        latency_ms: Math.round((performance.now() - started) * 1000) / 1000,
        ...(code === null ? {} : { reason_code: code }),
        ...(answer.reason ? { reason: answer.reason } : {}),
      },
      reserved,
    )
  }

  /** Bearer token equal to admin.token: both sides hashed to 32 bytes first, then compared in constant time. */
  private authorized(req: IncomingMessage): boolean {
    const header = req.headers.authorization
    if (header === undefined) return false
    const match = /^Bearer +(\S+) *$/i.exec(header)
    // A malformed header is compared too (as an empty token), so its timing says nothing either.
    const presented = digest(match === null ? '' : match[1])
    return timingSafeEqual(presented, this.tokenDigest) && match !== null
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest()
}

/**
 * `admin`, or `admin:<name>` when the caller says who it is (X-Wardline-Operator; the CLI sends the
 * local user name). A hint for the trail only: anyone holding the token can write any name.
 */
function operatorOf(req: IncomingMessage): string {
  const hint = req.headers['x-wardline-operator']
  if (typeof hint !== 'string' || hint === '' || hasControlCharacters(hint)) return 'admin'
  return `admin:${hint.slice(0, MAX_OPERATOR_CHARS)}`
}

/** A caller's path for a message: quoted, bounded, control characters escaped by JSON. */
function describePath(path: string): string {
  return JSON.stringify(path.length > 200 ? `${path.slice(0, 200)}…` : path)
}

function describeMethod(method: string): string {
  return /^[A-Z]{1,16}$/.test(method) ? method : JSON.stringify(method.slice(0, 32))
}

/**
 * The JSON body of a POST (application/json, at most MAX_ADMIN_BODY_BYTES); other methods take none.
 * A declared length over the bound is refused before a byte is read.
 */
async function readBody(req: IncomingMessage, wanted: boolean): Promise<unknown> {
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > MAX_ADMIN_BODY_BYTES) {
    throw new AdminRefusal(413, 'body.too_large', `the body is larger than ${MAX_ADMIN_BODY_BYTES} bytes`)
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > MAX_ADMIN_BODY_BYTES) throw new AdminRefusal(413, 'body.too_large', `the body is larger than ${MAX_ADMIN_BODY_BYTES} bytes`)
    chunks.push(chunk)
  }
  if (!wanted) {
    if (size > 0)
      throw new AdminRefusal(400, 'admin.invalid_request', `${req.method ?? ''} takes no body (parameters go in the query string)`)
    return undefined
  }
  const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase()
  if (type !== 'application/json')
    throw new AdminRefusal(415, 'admin.invalid_request', 'the body must be JSON (Content-Type: application/json)')
  const text = Buffer.concat(chunks).toString('utf8')
  try {
    return JSON.parse(text) as unknown
  } catch (err) {
    throw new AdminRefusal(400, 'admin.invalid_request', `the body is not valid JSON: ${(err as Error).message}`)
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return
  const text = JSON.stringify(body) + '\n'
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
  })
  res.end(text)
}
