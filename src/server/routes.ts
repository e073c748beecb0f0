import type { IncomingMessage, ServerResponse } from 'node:http'
import type { ResourceMetadata } from '../config/types'
import type { Metrics } from '../metrics'
import type { ReadinessCheck } from '../readiness'

export interface LocalRoutes {
  /** Answers the request when it is one of the gateway's own endpoints; false means "proxy it". */
  handle(req: IncomingMessage, res: ServerResponse): boolean
}

export interface RouteDeps {
  readonly metrics: Metrics
  readonly readiness: readonly ReadinessCheck[]
  readonly isShuttingDown: () => boolean
  readonly beforeMetrics: () => void
  readonly resourceMetadata: ResourceMetadata | null
  /** Extra fields for the /readyz body (budget fail-opens in the last minute…). */
  readonly readyDetails?: () => Record<string, unknown>
}

const PROTECTED_RESOURCE = '/.well-known/oauth-protected-resource'

/** /healthz, /readyz, /metrics (any method) and the RFC 9728 metadata: never proxied, never audited. */
export function localRoutes(deps: RouteDeps): LocalRoutes {
  const metadataBody = deps.resourceMetadata === null ? null : JSON.stringify({
    resource: deps.resourceMetadata.resource,
    authorization_servers: deps.resourceMetadata.authorizationServers,
    ...(deps.resourceMetadata.scopesSupported.length ? { scopes_supported: deps.resourceMetadata.scopesSupported } : {}),
    bearer_methods_supported: ['header'],
  })
  return {
    handle(req, res) {
      const url = req.url ?? '/'
      const q = url.indexOf('?')
      const path = q < 0 ? url : url.slice(0, q)
      if (path === '/healthz') {
        json(res, 200, { status: 'ok' })
        return true
      }
      if (path === '/readyz') {
        void ready(deps, res)
        return true
      }
      if (path === '/metrics') {
        deps.beforeMetrics()
        deps.metrics.registry.metrics().then(
          (text) => {
            res.writeHead(200, { 'content-type': deps.metrics.registry.contentType })
            res.end(text)
          },
          () => json(res, 500, { status: 'error' }),
        )
        return true
      }
      if (metadataBody !== null && (path === PROTECTED_RESOURCE || path.startsWith(`${PROTECTED_RESOURCE}/`))) {
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' })
        res.end(metadataBody)
        return true
      }
      return false
    },
  }
}

async function ready(deps: RouteDeps, res: ServerResponse): Promise<void> {
  if (deps.isShuttingDown()) {
    json(res, 503, { status: 'shutting_down' })
    return
  }
  const checks: Record<string, unknown> = {}
  let ok = true
  await Promise.all(
    deps.readiness.map(async (c) => {
      try {
        const result = await c.check()
        checks[c.name] = { ok: result.ok, ...result.detail }
        ok &&= result.ok
      } catch (err) {
        checks[c.name] = { ok: false, error: (err as Error).message }
        ok = false
      }
    }),
  )
  json(res, ok ? 200 : 503, { status: ok ? 'ready' : 'not_ready', checks, ...deps.readyDetails?.() })
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}
