import { type Server, createServer } from 'node:http'
import type { Config, MetricsConfig } from '../config/types'
import { describeError } from '../errors'
import type { Logger } from '../log'
import { boundAddress, listenOrExplain } from '../net/listen'
import type { LocalRoutes } from './routes'

const NOT_FOUND = JSON.stringify({ error: 'not found: this listener serves /metrics, /healthz and /readyz' })

/**
 * metrics.listen: /metrics (and /healthz, /readyz, for a sidecar or a probe on the same port) on a
 * listener of its own, plain HTTP and without a token, so the public listener need not expose them.
 * Nothing else is served here: no MCP path, nothing proxied, nothing audited.
 */
export class MetricsListener {
  private closing: Promise<void> | null = null

  private constructor(readonly server: Server) {}

  /** Listens on metrics.listen; a port it cannot bind stops startup with WL_LISTEN_FAILED naming the key. */
  static async start(settings: MetricsConfig, config: Config, routes: LocalRoutes, log: Logger): Promise<MetricsListener> {
    const server = createServer({ requestTimeout: 10_000, headersTimeout: 5_000, keepAliveTimeout: 5_000 }, (req, res) => {
      if (routes.handleMonitoring(req, res)) return
      res.writeHead(404, { 'content-type': 'application/json', 'content-length': NOT_FOUND.length, 'cache-control': 'no-store' })
      res.end(NOT_FOUND)
    })
    await listenOrExplain(server, settings.listen, 'metrics.listen', config)
    server.on('error', (err) => log.error('metrics listener error', { error: describeError(err) }))
    const listener = new MetricsListener(server)
    log.info('metrics listening: /metrics is served here, and answered 404 on the public listener', { metrics_listen: listener.address() })
    return listener
  }

  /** host:port it listens on (the real port when metrics.listen asked for 0). */
  address(): string {
    return boundAddress(this.server)
  }

  get url(): string {
    return `http://${this.address()}`
  }

  /** Stops accepting and ends every connection (a scrape in progress is cut: Prometheus retries). Idempotent. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.server.close(() => resolve())
      this.server.closeAllConnections()
    })
    return this.closing
  }
}
