import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { JsonlAuditSink } from '../audit/jsonl-sink'
import { AuditTrail } from '../audit/trail'
import { AuditWriter } from '../audit/writer'
import { HeaderAuthenticator } from '../auth/header-authenticator'
import { type Authenticator, authStage } from '../auth/stage'
import type { Config } from '../config/types'
import { WardlineError } from '../errors'
import { jsonRpcStage } from '../jsonrpc/stage'
import { createLogger, type Logger } from '../log'
import { Metrics } from '../metrics'
import type { Stage } from '../pipeline/stage'
import { Upstream } from '../upstream/forward'
import { Gateway } from './gateway'
import { type ReadinessCheck, localRoutes } from './routes'

export interface GatewayOptions {
  readonly log?: Logger
  /** Collect Node's default process metrics (off in tests: they start timers). */
  readonly processMetrics?: boolean
}

export interface RunningGateway {
  /** http://host:port of the listener (the real port when config asked for 0). */
  readonly url: string
  readonly server: Server
  readonly metrics: Metrics
  readonly audit: AuditTrail
  /** Graceful stop: readiness 503, stop accepting, let in-flight requests finish (bounded), flush audit, release. */
  shutdown(): Promise<void>
}

/** The composition root: turns a validated Config into a listening gateway. */
export async function startGateway(config: Config, options: GatewayOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger(config.logLevel)
  const metrics = new Metrics(options.processMetrics ?? false)
  /** Released in reverse order of acquisition at shutdown, after the audit trail is flushed. */
  const closers: Array<() => Promise<void> | void> = []
  const readiness: ReadinessCheck[] = []

  const writers: AuditWriter[] = []
  if (config.audit.output !== null) {
    const sink = await JsonlAuditSink.open(config.audit.output)
    writers.push(new AuditWriter(sink, log, {
      maxQueueEntries: config.audit.maxQueueEntries,
      onDropped: (n, name) => metrics.auditDropped.labels(name).inc(n),
    }))
  }
  const audit = new AuditTrail(writers, metrics)

  const authenticator = await openAuthenticator(config, log)
  const upstream = new Upstream(config.upstream)
  const stages: Stage[] = [
    authStage(authenticator, config.auth),
    jsonRpcStage(config.limits.maxBodyBytes),
  ]
  const gateway = new Gateway(stages, upstream, audit, log)

  let shuttingDown = false
  const routes = localRoutes({
    metrics,
    readiness,
    isShuttingDown: () => shuttingDown,
    beforeMetrics: () => audit.observeQueues(),
    resourceMetadata: config.auth.resourceMetadata,
  })
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
    if (!routes.handle(req, res)) void gateway.handle(req, res)
  })
  // Streams (SSE) stay open for as long as the client wants; only idle keep-alive sockets time out.
  server.headersTimeout = 60_000
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(config.listen.port, config.listen.host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
  log.info('wardline listening', { listen: `${host}:${address.port}`, upstream: config.upstream.url, auth: config.auth.mode })

  let stopping: Promise<void> | null = null
  const shutdown = (): Promise<void> => {
    stopping ??= (async () => {
      shuttingDown = true
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      const deadline = Date.now() + config.shutdownGraceSeconds * 1000
      while (gateway.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
      if (gateway.inFlight > 0) log.warn('shutdown grace period over: closing open requests', { in_flight: gateway.inFlight })
      server.closeAllConnections()
      await closed
      // Requests cut short above still write their audit entry in their `finally`: let them.
      await new Promise((r) => setImmediate(r))
      await audit.close()
      await upstream.destroy()
      authenticator.close?.()
      for (const close of closers.reverse()) await close()
      log.info('wardline stopped')
    })()
    return stopping
  }

  return { url: `http://${host}:${address.port}`, server, metrics, audit, shutdown }
}

async function openAuthenticator(config: Config, log: Logger): Promise<Authenticator> {
  if (config.auth.mode === 'header') {
    log.warn('auth.mode is header: identities are taken from X-Wardline-Identity unverified; use only behind a trusted proxy')
    return new HeaderAuthenticator()
  }
  // TODO(#3): JWT verification.
  throw new WardlineError('WL_CONFIG_INVALID', 'auth.mode: jwt is not implemented yet')
}
