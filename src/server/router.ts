import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AuditTrail } from '../audit/trail'
import { MESSAGE_PATH } from '../config/spec'
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

export { MESSAGE_PATH }

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
function upstreamPath(route: OpenRoute, target: ServerTarget, method: string | undefined): string | null {
  if (target.rest === '') return route.endpoint + target.query
  // Only a legacy server has paths below its name: the message endpoint its event stream announced,
  // which takes POSTs alone. Any other method there would carry the server's headers to whatever
  // else its origin serves (a second stream, a DELETE) under a path no endpoint event named.
  if (!route.legacy || method !== 'POST' || !MESSAGE_PATH.test(target.rest)) return null
  // message_path pins the one path: the server's headers reach nothing else on its origin.
  if (route.messagePath !== null && target.rest !== route.messagePath) return null
  return target.rest + target.query
}

interface OpenRoute {
  readonly feature: RouteFeature
  /** The server's endpoint path (its url's path, never empty). */
  readonly endpoint: string
  /** `transport: sse`: its message endpoint is a path below its name. */
  readonly legacy: boolean
  /** `message_path`: the only path below its name; null: any plain path. */
  readonly messagePath: string | null
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
  /** A server a reload removed: what is kept under its name elsewhere (its probe's metric series) goes. */
  readonly forget?: (server: string) => void
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
  /** Shutdown released the routes: a reload now would open pools nothing closes. */
  private closed = false
  /** Retired routes being closed now: shutdown waits for them as for the others. */
  private readonly closing = new Set<Promise<void>>()
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
        const path = upstreamPath(route, target, req.method)
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
   * last running request (a stream included) has ended. All or nothing: a server that cannot be
   * opened fails the reload with an error naming it, and the map in force stays as it was.
   */
  reload(routes: readonly RouteConfig[], defaultServer: string | null): void {
    if (this.closed) throw new Error('the gateway is shutting down: its servers are not reloaded')
    this.swap(routes, defaultServer)
  }

  /** True when `name` is a server new requests reach now. */
  has(name: string): boolean {
    return this.byName.has(name)
  }

  private swap(routes: readonly RouteConfig[], defaultServer: string | null): void {
    const next = new Map<string, OpenRoute>()
    const kept: Array<[RouteFeature, RouteConfig]> = []
    const opened: RouteFeature[] = []
    try {
      // Every new route first: until all are open nothing running has changed, and those opened so far
      // are closed again when one fails.
      for (const config of routes) {
        const name = config.server ?? ''
        const open = this.byName.get(name)
        if (open !== undefined && sameServer(open.feature.config, config)) {
          kept.push([open.feature, config])
          next.set(name, open)
          continue
        }
        const feature = this.openOne(config)
        opened.push(feature)
        const legacy = 'transport' in config.upstream && config.upstream.transport === 'sse'
        const messagePath = 'messagePath' in config.upstream ? config.upstream.messagePath : null
        next.set(name, { feature, endpoint: new URL(config.upstream.url).pathname, legacy, messagePath })
      }
    } catch (err) {
      for (const feature of opened) void closeRoute(feature, this.deps.log)
      throw err
    }
    for (const [feature, config] of kept) feature.reload(config)
    const before = this.byName
    this.byName = next
    this.defaultRoute = defaultServer === null ? null : (next.get(defaultServer) ?? null)
    for (const [name, open] of before) {
      if (next.get(name) === open) continue
      this.retire(open.feature)
      if (!next.has(name)) this.deps.forget?.(name)
    }
  }

  /** Opens one route; a failure says which server, so the rejected reload names it. */
  private openOne(config: RouteConfig): RouteFeature {
    let feature: RouteFeature
    try {
      feature = this.deps.open(config)
    } catch (err) {
      throw new Error(`server ${JSON.stringify(config.server)} could not be opened: ${describeError(err)}`, { cause: err })
    }
    // Opened after startup, its first probe is not awaited: /readyz says "not probed yet" until it ends.
    feature.firstProbe.catch((err: unknown) =>
      this.deps.log.error('a server probe failed to start', { server: config.server, error: describeError(err) }),
    )
    return feature
  }

  private retire(feature: RouteFeature): void {
    // Its probe stops now: no readiness reads it, and its series carry the server's name, which a
    // changed server's new probe reports on from now on.
    void feature.stopProbe().catch(() => undefined)
    this.retired.add(feature)
    this.retireTimer ??= setInterval(() => this.closeIdle(), RETIRE_POLL_MS).unref()
  }

  /** Closes each retired route no request runs on any more. */
  private closeIdle(): void {
    for (const feature of this.retired) {
      if (feature.gateway.inFlight > 0) continue
      this.retired.delete(feature)
      const closed = closeRoute(feature, this.deps.log).finally(() => this.closing.delete(closed))
      this.closing.add(closed)
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
    this.closed = true
    if (this.retireTimer !== null) clearInterval(this.retireTimer)
    this.retireTimer = null
    const all = [...[...this.byName.values()].map((r) => r.feature), ...this.retired]
    this.byName = new Map()
    this.retired.clear()
    await Promise.all([...all.map((f) => closeRoute(f, this.deps.log)), ...this.closing])
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
