import type { IncomingMessage, ServerResponse } from 'node:http'
import type { ResourceMetadata } from '../config/types'
import type { ServerMetrics } from './metrics'
import { type ReadinessCheck, SharedReadiness } from '../readiness'
import { PROTECTED_RESOURCE, metadataDocument, serverResource } from '../auth/resource-metadata'

export interface LocalRoutes {
  /** Answers the request when it is one of the gateway's own endpoints; false means "proxy it". */
  handle(req: IncomingMessage, res: ServerResponse): boolean
  /** The metrics listener's routes (metrics.listen): /metrics, /healthz, /readyz; false for anything else. */
  handleMonitoring(req: IncomingMessage, res: ServerResponse): boolean
}

export interface RouteDeps {
  readonly metrics: ServerMetrics
  /** Read once, when localRoutes is called: every check must be in it by then. */
  readonly readiness: readonly ReadinessCheck[]
  readonly isShuttingDown: () => boolean
  readonly beforeMetrics: () => void
  readonly resourceMetadata: ResourceMetadata | null
  /**
   * With `servers:`: whether a name is a server new requests reach now (a reload changes the answer),
   * so that each has its own metadata document; null with `upstream:` alone.
   */
  readonly servers?: { has(name: string): boolean } | null
  /** Extra fields for the /readyz body (budget fail-opens in the last minute…). */
  readonly readyDetails?: () => Record<string, unknown>
  /** How long a readiness result is reused (default 1000 ms; see SharedReadiness). */
  readonly readinessMaxAgeMs?: number
  /** Monotonic clock for that age (tests inject one). */
  readonly now?: () => number
  /** metrics.listen is set: /metrics is served there, and the main listener answers it 404 (never proxied). */
  readonly metricsElsewhere?: boolean
}

/** Where each server's own metadata document is (`servers:`): the well-known segment, then its path /mcp/<name>. */
const SERVER_RESOURCE = `${PROTECTED_RESOURCE}/mcp/`

/**
 * OAuth and OpenID discovery documents, in every form MCP clients try (the SDK's and mcp-remote's
 * lists): RFC 9728 §3.1 protected-resource metadata and RFC 8414 §3.1 authorization-server metadata
 * with the well-known segment before the path (`/.well-known/oauth-authorization-server/mcp`), and
 * OpenID Connect Discovery 1.0 §4 with it before or after (`/mcp/.well-known/openid-configuration`).
 */
const DISCOVERY_PATH =
  /^(?:\/\.well-known\/(?:oauth-protected-resource|oauth-authorization-server|openid-configuration)(?:\/.*)?|\/.*\/\.well-known\/(?:openid-configuration|oauth-authorization-server))$/

const NOT_FOUND_BODY = JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: 404, message: 'Not found' } })

/**
 * /healthz, /readyz, /metrics (any method; a 404 when metrics.listen serves it), the RFC 9728 metadata, and a 404 to every other OAuth/OpenID
 * discovery GET: never proxied, never audited.
 */
export function localRoutes(deps: RouteDeps): LocalRoutes {
  // /readyz needs no token: every check is shared (one probe in flight, a result reused for 1 s), so
  // a flood of probes costs the database one connection a second, not one per request.
  // A check that only reads a result kept elsewhere (the upstream probe's) costs nothing to ask: fresh each time.
  const checks = deps.readiness.map((c) =>
    c.instant === true ? c : new SharedReadiness(c, deps.readinessMaxAgeMs ?? READINESS_MAX_AGE_MS, deps.now),
  )
  // wardline_ready asks the same shared checks at scrape time: a scrape within a second of a probe
  // reuses its result, and scrapes and probes together still cost at most one ping at a time.
  deps.metrics.observeReadiness(async () => (await readiness(deps, checks)).ok)
  const metadata = deps.resourceMetadata
  const metadataBody = metadata === null ? null : metadataDocument(metadata, metadata.resource)
  const servers = deps.servers ?? null
  // Each server's document, made at its first request: one per name a config ever held.
  const serverBodies = new Map<string, string>()
  /** The document at `path` (below the well-known segment), or null for a server not in the map. */
  const metadataAt = (path: string): string | null => {
    if (servers === null || metadata === null || !path.startsWith(SERVER_RESOURCE)) return metadataBody
    const name = path.slice(SERVER_RESOURCE.length)
    if (!servers.has(name)) return null
    let body = serverBodies.get(name)
    if (body === undefined) serverBodies.set(name, (body = metadataDocument(metadata, serverResource(metadata.resource, name))))
    return body
  }
  const serveMetrics = (res: ServerResponse): void => {
    // A gauge refreshed here that throws costs this scrape a 500, as a collector that throws does; in the
    // request listener it would be an uncaught exception, which stops the gateway.
    try {
      deps.beforeMetrics()
    } catch {
      return json(res, 500, { status: 'error' })
    }
    deps.metrics.registry.metrics().then(
      (text) => {
        res.writeHead(200, { 'content-type': deps.metrics.registry.contentType })
        res.end(text)
      },
      () => json(res, 500, { status: 'error' }),
    )
  }
  const metricsHere = deps.metricsElsewhere !== true
  /** /healthz, /readyz and, where this listener serves it, /metrics; false for any other path. */
  const monitoring = (path: string, res: ServerResponse, withMetrics: boolean): boolean => {
    if (path === '/healthz') json(res, 200, { status: 'ok' })
    else if (path === '/readyz') void ready(deps, checks, res)
    else if (path === '/metrics' && withMetrics) serveMetrics(res)
    else return false
    return true
  }
  return {
    handleMonitoring: (req, res) => monitoring(pathOf(req), res, true),
    handle(req, res) {
      const path = pathOf(req)
      if (monitoring(path, res, metricsHere)) return true
      if (path === '/metrics') {
        // metrics.listen serves it. Answered, not proxied: the path is the gateway's, and a scraper left
        // on the old address gets a plain 404 rather than whatever the upstream makes of it.
        notFound(req, res)
        return true
      }
      if (metadataBody !== null && (path === PROTECTED_RESOURCE || path.startsWith(`${PROTECTED_RESOURCE}/`))) {
        const body = metadataAt(path)
        if (body === null) {
          // A name no server has (any more): a client is told of no resource the gateway does not serve.
          notFound(req, res)
          return true
        }
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' })
        res.end(body)
        return true
      }
      // The gateway is the OAuth resource server its clients see: an upstream's own discovery documents
      // would send them to an authorization server whose tokens the gateway does not accept. Clients
      // (mcp-remote: six of them per start) send these GETs without the token, as RFC 9728 §3 and RFC
      // 8414 §3 intend; answering 401 and auditing `unauthorized` made every start read as six failed
      // logins. Not audited, as /healthz: a public, constant answer about no caller and no upstream.
      if ((req.method === 'GET' || req.method === 'HEAD') && path.includes('/.well-known/') && DISCOVERY_PATH.test(path)) {
        notFound(req, res)
        return true
      }
      return false
    },
  }
}

/** The request's path, without its query. */
function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/'
  const q = url.indexOf('?')
  return q < 0 ? url : url.slice(0, q)
}

/** The gateway's own 404 (a path it answers itself and never proxies): a JSON-RPC error, not cached. */
function notFound(req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(404, {
    'content-type': 'application/json',
    'cache-control': 'no-store',
    'content-length': Buffer.byteLength(NOT_FOUND_BODY),
  })
  res.end(req.method === 'HEAD' ? undefined : NOT_FOUND_BODY)
}

/** Longest a /readyz answer's checks may be out of date. */
const READINESS_MAX_AGE_MS = 1000

async function ready(deps: RouteDeps, checks: readonly ReadinessCheck[], res: ServerResponse): Promise<void> {
  const { ok, body } = await readiness(deps, checks)
  json(res, ok ? 200 : 503, body)
}

/** The features' /readyz fields; one that throws is reported in the body rather than leaving the probe unanswered. */
function readyDetails(deps: RouteDeps): Record<string, unknown> | undefined {
  try {
    return deps.readyDetails?.()
  } catch (err) {
    return { details_error: err instanceof Error ? err.message : String(err) }
  }
}

/** What /readyz answers (and wardline_ready reports): every required check passes and shutdown has not begun. */
async function readiness(deps: RouteDeps, checks: readonly ReadinessCheck[]): Promise<{ ok: boolean; body: unknown }> {
  if (deps.isShuttingDown()) return { ok: false, body: { status: 'shutting_down' } }
  const results: Record<string, unknown> = {}
  let ok = true
  await Promise.all(
    checks.map(async (c) => {
      try {
        const result = await c.check()
        results[c.name] = { ok: result.ok, ...result.detail }
        if (c.required !== false) ok &&= result.ok
      } catch (err) {
        results[c.name] = { ok: false, error: (err as Error).message }
        if (c.required !== false) ok = false
      }
    }),
  )
  return { ok, body: { status: ok ? 'ready' : 'not_ready', checks: results, ...readyDetails(deps) } }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}
