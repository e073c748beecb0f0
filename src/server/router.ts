import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AuditTrail } from '../audit/trail'
import type { Closer, Contribution } from '../feature'
import { describeError } from '../errors'
import type { Logger } from '../log'
import type { Exchange } from '../pipeline/exchange'
import type { Refusal, Stage } from '../pipeline/stage'
import type { ReadinessCheck } from '../readiness'
import type { RouteConfig, SharedStages } from './chain'
import { type Dispatch, Gateway } from './gateway'
import type { RouteFeature } from './route'

/** Where every server is reached: `/mcp/<name>`, and `/mcp` for `default_server`. */
export const SERVERS_PATH = '/mcp'

/**
 * A path below a legacy (`sse`) server's name: the message endpoint its stream named, relative to the
 * server's origin. Plain segments only: no empty, `.` or `..` segment, no percent-encoding, nothing a
 * server could decode into another path.
 */
const MESSAGE_PATH = /^(?:\/[A-Za-z0-9\-_~!$&'()*+,;=:@]+(?:\.[A-Za-z0-9\-_~!$&'()*+,;=:@]*)*)+\/?$/

/** What a request path names, or null when it names no server at all. */
export interface ServerTarget {
  /** The name after /mcp/; null for /mcp itself (the default server). */
  readonly name: string | null
  /** What follows the name (`/messages` of a legacy server's endpoint), or ''. */
  readonly rest: string
  /** `?…` as sent, or ''. */
  readonly query: string
}

/** Reads `/mcp`, `/mcp/<name>` and `/mcp/<name>/<rest>` (query kept apart); anything else is null. */
export function serverTarget(url: string): ServerTarget | null {
  const q = url.indexOf('?')
  const path = q < 0 ? url : url.slice(0, q)
  const query = q < 0 ? '' : url.slice(q)
  if (path === SERVERS_PATH) return { name: null, rest: '', query }
  if (!path.startsWith('/mcp/')) return null
  const slash = path.indexOf('/', 5)
  return slash < 0 ? { name: path.slice(5), rest: '', query } : { name: path.slice(5, slash), rest: path.slice(slash), query }
}

/** The path, below the server's origin, a request for `target` is sent to; null when the server has no such path. */
function upstreamPath(route: OpenRoute, target: ServerTarget): string | null {
  if (target.rest === '') return route.endpoint + target.query
  // Only a legacy server has paths below its name: the message endpoint its event stream announced.
  if (!route.legacy || !MESSAGE_PATH.test(target.rest)) return null
  return target.rest + target.query
}

interface OpenRoute {
  readonly feature: RouteFeature
  /** The server's endpoint path (its url's path, never empty). */
  readonly endpoint: string
  /** `transport: sse`: its message endpoint is a path below its name. */
  readonly legacy: boolean
}

const UNKNOWN_SERVER: Refusal = {
  status: 404,
  decision: 'error',
  code: 'route.unknown_server',
  reason: 'the path names no server',
  message: 'Not found: no MCP server at this path',
}

/** The last stage of the chain that answers paths naming no server: after auth, so that the map of servers is shown to no stranger. */
const unknownServerStage: Stage = {
  name: 'unknown-server',
  run: (ex: Exchange) => ({ ...UNKNOWN_SERVER, reason: `no server at ${describePath(ex.req.url ?? '')}` }),
}

/** A path as the audit reason shows it: its query dropped (it may carry anything) and its length bounded. */
function describePath(url: string): string {
  const q = url.indexOf('?')
  const path = q < 0 ? url : url.slice(0, q)
  return JSON.stringify(path.length > 200 ? `${path.slice(0, 200)}…` : path)
}

/** How often a retired route is checked for requests still running before its connections are closed. */
const RETIRE_POLL_MS = 500

export interface RouterDeps {
  readonly shared: SharedStages
  readonly audit: AuditTrail
  readonly log: Logger
  /** Opens one route (its upstream, probe and chain). */
  readonly open: (route: RouteConfig) => RouteFeature
}

/**
 * The gateway's front when `servers:` names several servers: each request goes to the route its path
 * names (`/mcp/<name>`, `/mcp` for the default server), with the path its server's endpoint has. A path
 * naming none is answered 404 after auth, audited once, and reaches no server. A reload swaps the map
 * whole: new requests see the new servers, requests already running finish on the route they started
 * on, and a removed or changed server's connections close once its last request ends.
 */
export class Router implements Dispatch, Contribution {
  private byName = new Map<string, OpenRoute>()
  private defaultRoute: OpenRoute | null = null
  /** Routes removed or replaced by a reload, until their last request ends. */
  private readonly retired = new Set<RouteFeature>()
  private retireTimer: NodeJS.Timeout | null = null
  private readonly unknown: Gateway
  readonly closers: readonly Closer[] = [() => this.close()]
  readonly readiness: readonly ReadinessCheck[]

  constructor(
    routes: readonly RouteConfig[],
    defaultServer: string | null,
    private readonly deps: RouterDeps,
  ) {
    const { shared } = deps
    // Host, Origin, token and revocation as on every route: a stranger learns nothing, a caller's
    // mistake is audited under their name.
    const stages = [shared.http, shared.auth, shared.revocation, unknownServerStage]
    const nowhere = { forward: () => Promise.reject(new Error('a path naming no server was forwarded')) }
    this.unknown = new Gateway(stages, nowhere, deps.audit, deps.log)
    this.readiness = [serversReadiness(() => [...this.byName.values()].map((r) => r.feature))]
    this.swap(routes, defaultServer)
  }

  /** Every route new requests reach, by server name. */
  get routes(): ReadonlyMap<string, RouteFeature> {
    return new Map([...this.byName].map(([name, r]) => [name, r.feature]))
  }

  get inFlight(): number {
    let n = this.unknown.inFlight
    for (const r of this.byName.values()) n += r.feature.gateway.inFlight
    for (const f of this.retired) n += f.gateway.inFlight
    return n
  }

  readonly handle = (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const target = serverTarget(req.url ?? '')
    if (target !== null) {
      const route = target.name === null ? this.defaultRoute : this.byName.get(target.name)
      if (route !== undefined && route !== null) {
        const path = upstreamPath(route, target)
        if (path !== null) return route.feature.gateway.handle(req, res, path)
      }
    }
    return this.unknown.handle(req, res)
  }

  drain(): void {
    this.each((g) => g.drain())
  }

  cutRemaining(): void {
    this.each((g) => g.cutRemaining())
  }

  /**
   * A reload: servers whose settings are unchanged keep their connections and take the new rules;
   * new ones are opened; removed and changed ones stop taking requests now and close once their
   * last running request (a stream included) has ended.
   */
  reload(routes: readonly RouteConfig[], defaultServer: string | null): void {
    this.swap(routes, defaultServer)
  }

  private swap(routes: readonly RouteConfig[], defaultServer: string | null): void {
    const next = new Map<string, OpenRoute>()
    for (const config of routes) {
      const name = config.server ?? ''
      const open = this.byName.get(name)
      if (open !== undefined && sameServer(open.feature.config, config)) {
        open.feature.reload(config)
        next.set(name, open)
        continue
      }
      const feature = this.deps.open(config)
      const legacy = 'transport' in config.upstream && config.upstream.transport === 'sse'
      next.set(name, { feature, endpoint: new URL(config.upstream.url).pathname, legacy })
    }
    for (const [name, open] of this.byName) if (next.get(name) !== open) this.retire(open.feature)
    this.byName = next
    this.defaultRoute = defaultServer === null ? null : (next.get(defaultServer) ?? null)
  }

  private retire(feature: RouteFeature): void {
    this.retired.add(feature)
    this.retireTimer ??= setInterval(() => this.closeIdle(), RETIRE_POLL_MS).unref()
  }

  /** Closes each retired route no request runs on any more. */
  private closeIdle(): void {
    for (const feature of this.retired) {
      if (feature.gateway.inFlight > 0) continue
      this.retired.delete(feature)
      void closeRoute(feature, this.deps.log)
    }
    if (this.retired.size === 0 && this.retireTimer !== null) {
      clearInterval(this.retireTimer)
      this.retireTimer = null
    }
  }

  private each(f: (g: Gateway) => void): void {
    f(this.unknown)
    for (const r of this.byName.values()) f(r.feature.gateway)
    for (const feature of this.retired) f(feature.gateway)
  }

  /** Shutdown, once every request has ended: every route's connections and probes. */
  private async close(): Promise<void> {
    if (this.retireTimer !== null) clearInterval(this.retireTimer)
    this.retireTimer = null
    const all = [...[...this.byName.values()].map((r) => r.feature), ...this.retired]
    this.byName = new Map()
    this.retired.clear()
    await Promise.all(all.map((f) => closeRoute(f, this.deps.log)))
  }
}

/** True when a reload leaves a server's connection settings as they were (its rules may change). */
function sameServer(a: RouteConfig, b: RouteConfig): boolean {
  return JSON.stringify(a.upstream) === JSON.stringify(b.upstream)
}

async function closeRoute(feature: RouteFeature, log: Logger): Promise<void> {
  for (const close of [...(feature.closers ?? [])].reverse()) {
    try {
      await close()
    } catch (err) {
      log.error('a server route failed to close', { error: describeError(err) })
    }
  }
}

/**
 * /readyz with several servers, under `checks.servers`: `servers.<name>` is each server's probe (its
 * `ok`, and when it fails the `cause`: `connection refused`, `timeout after 2 s`, `HTTP 502`), `down`
 * names every server whose last probe failed (sorted; empty when none did), and `ok` is true while at
 * least one server whose probe counts for readiness (`affects_readiness`) is up, or none has one that
 * counts: one server down must not take the others' callers out of a load balancer. A server whose
 * probe does not count is still listed in `down`; one without a probe reads `probe: "off"`.
 */
function serversReadiness(routes: () => RouteFeature[]): ReadinessCheck {
  return {
    name: 'servers',
    instant: true,
    async check() {
      const results = await Promise.all(
        routes().map(async (route) => {
          const name = route.config.server ?? ''
          const check = route.readiness?.[0]
          if (check === undefined) return { name, counts: false, ok: true, detail: { probe: 'off' } }
          const result = await check.check().catch((err: unknown) => ({ ok: false, detail: { cause: describeError(err) } }))
          return { name, counts: check.required !== false, ok: result.ok, detail: result.detail }
        }),
      )
      const servers: Record<string, unknown> = {}
      const down: string[] = []
      let counted = 0
      let up = 0
      for (const r of results.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
        servers[r.name] = { ok: r.ok, ...r.detail }
        if (!r.ok) down.push(r.name)
        if (!r.counts) continue
        counted++
        if (r.ok) up++
      }
      return { ok: counted === 0 || up > 0, detail: { down, servers } }
    },
  }
}
