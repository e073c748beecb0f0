import { type IncomingMessage, type Server, type ServerOptions, type ServerResponse, createServer } from 'node:http'
import { type Server as HttpsServer, createServer as createHttpsServer } from 'node:https'
import { setTimeout as sleep } from 'node:timers/promises'
import type { AuditTrail } from '../audit/trail'
import type { Config } from '../config/types'
import type { Closer } from '../feature'
import { withDeadline } from '../deadline'
import { describeError } from '../errors'
import type { Logger } from '../log'
import type { Dispatch } from './gateway'
import { boundAddress, listenOrExplain } from '../net/listen'
import type { LocalRoutes } from './routes'
import { type TlsMaterial, logCertificate, reloadTls } from '../net/tls'

/**
 * The gateway's states, in the only order it goes through them:
 *
 *   created ──start()──▶ serving ──shutdown()──▶ draining ──▶ stopped
 *
 * `reload()` applies only while serving; a second `shutdown()` joins the first.
 */
export type LifecycleState = 'created' | 'serving' | 'draining' | 'stopped'

export interface LifecycleParts {
  readonly gateway: Dispatch
  readonly routes: LocalRoutes
  readonly audit: AuditTrail
  readonly log: Logger
  /** Released in reverse order of the list (the first acquired is released last), after the audit trail. */
  readonly closers: readonly Closer[]
  /**
   * Other listeners (the admin API), closed as soon as shutdown begins, before the gateway drains: no
   * budget reset or revocation starts while it drains, and the calls they were answering have recorded
   * their audit entries before the trail is flushed.
   */
  readonly listeners?: readonly Closer[]
  /** Builds and swaps in what a reload changes (server/reload.ts); returns the keys that need a restart. */
  readonly applyReload: (next: Config) => string[]
  /** The main listener's certificate and key, read by compose.ts when config.tls is set: it speaks HTTPS. */
  readonly tls?: TlsMaterial | null
}

/**
 * Longest a client may take over its TLS handshake: Node's default of 120 s would let a peer that
 * opens connections and never says a word hold each socket for two minutes.
 */
const TLS_HANDSHAKE_TIMEOUT_MS = 10_000

/** Longest wait at shutdown for the audit sinks to take every queued entry. */
const AUDIT_CLOSE_TIMEOUT_MS = 30_000

/**
 * Start, drain, shutdown and reload: the one place that knows what state the gateway is in. It owns
 * the listener; compose.ts folds the features into parts and hands them over.
 */
export class Lifecycle {
  private current: LifecycleState = 'created'
  private stopping: Promise<void> | null = null
  readonly server: Server

  constructor(
    private readonly config: Config,
    private readonly parts: LifecycleParts,
  ) {
    const requestTimeoutMs = config.limits.requestTimeoutSeconds * 1000
    const options: ServerOptions = {
      keepAliveTimeout: 65_000,
      // Node's requestTimeout covers receiving the request (a trickled body gets 408), never the
      // response: SSE streams stay open for as long as the client wants.
      requestTimeout: requestTimeoutMs,
      headersTimeout: Math.min(60_000, requestTimeoutMs),
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, requestTimeoutMs / 4)),
    }
    const tls = parts.tls ?? null
    if (tls === null) {
      this.server = createServer(options, this.onRequest)
      return
    }
    const clientCertificates = (config.tls?.caFile ?? null) !== null
    const https = createHttpsServer(
      {
        ...options,
        ...tls.context,
        handshakeTimeout: TLS_HANDSHAKE_TIMEOUT_MS,
        // tls.ca_file: a client without a certificate chaining to it fails the handshake (no HTTP at all).
        requestCert: clientCertificates,
        rejectUnauthorized: clientCertificates,
      },
      this.onRequest,
    )
    // A failed handshake (plain HTTP on this port, TLS 1.1, no client certificate) ends that connection
    // only; Node destroys the socket. Debug, not warn: any scanner can cause one per connection.
    https.on('tlsClientError', (err, socket) => {
      if (parts.log.isDebugEnabled()) {
        parts.log.debug('tls handshake failed', { peer: socket.remoteAddress ?? '', error: describeError(err) })
      }
    })
    this.server = https
  }

  get state(): LifecycleState {
    return this.current
  }

  /** True from the moment shutdown begins: /readyz answers 503 and connections close after their response. */
  get draining(): boolean {
    return this.current === 'draining' || this.current === 'stopped'
  }

  private readonly onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    // Draining: answer what arrives on a kept-alive connection, but close the connection after it
    // (gateway.drain() does the same for proxied requests already in flight).
    if (this.draining) res.shouldKeepAlive = false
    if (!this.parts.routes.handle(req, res)) this.parts.gateway.handle(req, res).catch(this.onUnhandled)
  }

  /**
   * Gateway.handle answers and audits every failure itself and never rejects; were it to, the failure
   * is logged here rather than left as an unhandled rejection. One function for every request: the
   * hot path creates no closure for it.
   */
  private readonly onUnhandled = (err: unknown): void => {
    this.parts.log.error('a request failed outside the gateway', { error: describeError(err), stack: (err as Error)?.stack })
  }

  /**
   * Listens on config.listen; resolves with the URL it listens on (the real port when the config asked
   * for 0). A bind that fails throws WL_LISTEN_FAILED naming the key and variable to change.
   */
  async start(): Promise<string> {
    if (this.current !== 'created') throw new Error(`cannot start a gateway that is ${this.current}`)
    // A busy port or a refused bind says which key (and which ${VAR}) to change.
    await listenOrExplain(this.server, this.config.listen, 'listen', this.config)
    this.current = 'serving'
    const listen = boundAddress(this.server)
    const tls = this.parts.tls ?? null
    if (tls !== null) logCertificate(this.parts.log, 'tls', tls)
    this.parts.log.info('wardline listening', {
      listen,
      ...(this.config.upstream !== null
        ? { upstream: this.config.upstream.url }
        : { servers: this.config.servers.map((s) => s.name), default_server: this.config.defaultServer }),
      auth: this.config.auth.mode,
      tls: tls === null ? 'off' : (this.config.tls?.caFile ?? null) !== null ? 'on, client certificates required' : 'on',
    })
    return `${tls === null ? 'http' : 'https'}://${listen}`
  }

  /**
   * SIGHUP: re-reads tls.cert_file and tls.key_file (the paths the gateway started with) and serves them
   * to new connections. Files that are unreadable, not PEM or do not match keep the running certificate
   * (logged at error). False then, or when the listener has no TLS.
   */
  reloadCertificates(): boolean {
    if (this.config.tls === null || (this.parts.tls ?? null) === null) return false
    return reloadTls(this.server as unknown as HttpsServer, this.config.tls, 'tls', this.parts.log)
  }

  /** Applies a new config's reloadable keys while serving; while draining or stopped it changes nothing. */
  reload(next: Config): string[] {
    if (this.current !== 'serving') {
      this.parts.log.warn('configuration reload ignored: the gateway is not serving', { state: this.current })
      return []
    }
    return this.parts.applyReload(next)
  }

  /**
   * Graceful stop: readiness 503 (and still serving for shutdown_delay_seconds), stop accepting, let
   * in-flight requests finish within shutdown_grace_seconds, cut the rest, wait for their audit
   * entries, flush the audit trail, release everything. Idempotent.
   */
  shutdown(): Promise<void> {
    this.stopping ??= this.stop()
    return this.stopping
  }

  private async stop(): Promise<void> {
    const wasServing = this.current === 'serving'
    this.current = 'draining'
    for (const close of this.parts.listeners ?? []) {
      await Promise.resolve(close()).catch((err: unknown) =>
        this.parts.log.error('a listener failed to close at shutdown', { error: describeError(err) }),
      )
    }
    if (wasServing) await this.drain()
    const { audit, log } = this.parts
    // Bounded: a sink that never completes a write (a stdout reader that stopped reading) must not
    // keep the process from exiting. The Postgres writer bounds itself well inside this.
    await withDeadline(audit.close(), AUDIT_CLOSE_TIMEOUT_MS, 'audit trail not flushed in time').catch((err: unknown) => {
      log.error('audit trail not fully written at shutdown: the entries still queued are lost', {
        error: describeError(err),
        pending: Object.fromEntries(audit.writers.map((w) => [w.sink.name, w.pending])),
      })
    })
    await this.release()
    this.current = 'stopped'
    if (wasServing) log.info('wardline stopped')
  }

  /** Stops accepting, lets requests finish within the grace period, cuts the rest and waits for their audit records. */
  private async drain(): Promise<void> {
    const { gateway, log } = this.parts
    const config = this.config
    gateway.drain()
    if (config.shutdownDelaySeconds > 0) {
      // Keep serving while /readyz says 503, so load balancers stop sending before connections are refused.
      log.info('not ready: still serving during shutdown_delay_seconds', { seconds: config.shutdownDelaySeconds })
      await sleep(config.shutdownDelaySeconds * 1000)
    }
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()))
    const deadline = Date.now() + config.shutdownGraceSeconds * 1000
    while (gateway.inFlight > 0 && Date.now() < deadline) {
      this.server.closeIdleConnections() // a connection whose last response just ended takes no new request
      await sleep(20)
    }
    if (gateway.inFlight > 0) {
      log.warn('shutdown grace period over: closing open requests', { in_flight: gateway.inFlight })
      gateway.cutRemaining()
    }
    this.server.closeAllConnections()
    await closed
    // Requests cut short above write their audit entry in their `finally` once their relay or stage
    // settles (a budget check is bounded by check_timeout_seconds): wait for that, bounded, so the
    // trail is complete before it is flushed and closed.
    const settleBy = Date.now() + Math.max(2000, config.budget.checkTimeoutSeconds * 1000 + 1000)
    while (gateway.inFlight > 0 && Date.now() < settleBy) await sleep(10)
    if (gateway.inFlight > 0) {
      log.error('requests still running after shutdown: their audit entries may be missing', { in_flight: gateway.inFlight })
    }
  }

  private async release(): Promise<void> {
    for (const close of [...this.parts.closers].reverse()) {
      try {
        await close()
      } catch (err) {
        this.parts.log.error('a resource failed to close at shutdown', { error: describeError(err) })
      }
    }
  }
}
