import type { HttpConfig } from '../config/types'
import { rawHeaderCount } from '../raw-headers'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'

/**
 * Request headers a browser may send to the gateway (Access-Control-Allow-Headers): the MCP transport's
 * (MCP 2025-11-25, Streamable HTTP) and the bearer token's. `mcp-param-*` is matched as a prefix: CORS
 * has no pattern syntax, so the requested names are echoed, never a `*`.
 */
const ALLOWED_REQUEST_HEADERS = new Set([
  'authorization',
  'content-type',
  'accept',
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
  'mcp-method',
  'mcp-name',
])
const PARAM_HEADER_PREFIX = 'mcp-param-'

/** The methods of the Streamable HTTP transport; HEAD and GET are CORS-safelisted anyway. */
const PREFLIGHT_HEADERS = {
  'access-control-allow-methods': 'GET, POST, DELETE, OPTIONS',
  'access-control-max-age': '600',
} as const

/** Header values can be kilobytes long; the audit reason keeps enough to recognise one. */
const MAX_REASON_VALUE = 200

/**
 * The first stage, before authentication: who may address the gateway at all.
 *
 * - `allowed_hosts` set: the Host header must be listed (an entry without a port accepts any port).
 *   The gateway rewrites Host for the upstream, so an upstream's own DNS-rebinding check (the SDK's
 *   allowedHosts) only ever sees the gateway's target; this check takes its place.
 * - An Origin header must be in `allowed_origins` (MCP 2025-11-25, Streamable HTTP, "Security
 *   Warning": servers MUST validate Origin to prevent DNS rebinding), or be the request's own origin
 *   (`http://` + its Host, `https://` over the gateway's TLS) when that Host is vouched for: listed in allowed_hosts, or a loopback name
 *   (a rebinding page's Host is its own domain, never `localhost`). With allowed_origins empty and a
 *   loopback listener, a loopback origin (`http(s)://localhost|127.0.0.1|[::1]`, any port: the MCP
 *   Inspector's page) is accepted too, as the official SDK's servers accept any origin on loopback
 *   (createMcpExpressApp validates only Host, against those three names). An accepted origin is
 *   recorded on the Exchange, and every response then carries CORS headers for it.
 * - A CORS preflight from a listed origin is answered here with a 204: it never carries credentials
 *   (Fetch standard, CORS-preflight request), so it could not pass authentication, and it asks the
 *   gateway's CORS policy, not the upstream's.
 *
 * Without Origin (every non-browser client) and without allowed_hosts, this costs two header lookups.
 */
export function httpStage(config: HttpConfig): Stage {
  const origins = new Set(config.allowedOrigins)
  const hosts = hostMatcher(config.allowedHosts)
  const loopbackOrigins = config.loopbackOrigins
  return {
    name: 'http',
    run(ex: Exchange) {
      const origin = ex.req.headers.origin
      if (origin !== undefined) {
        // Browsers send the ASCII serialisation, lower-case; the comparison does not rely on it.
        const lower = origin.toLowerCase()
        if (
          !origins.has(lower) &&
          !isSameOrigin(lower, ex.req.headers.host, hosts !== null, (ex.req.socket as { encrypted?: boolean }).encrypted === true) &&
          !(loopbackOrigins && LOOPBACK_ORIGIN.test(lower))
        ) {
          return forbidden('http.origin', 'origin', origin, 'allowed_origins', 'Forbidden: origin not allowed')
        }
        // Echoed as sent: a browser compares Access-Control-Allow-Origin to its Origin byte for byte.
        ex.corsOrigin = origin
      }
      if (hosts !== null) {
        const refusal = hosts.check(ex)
        if (refusal !== null) return refusal
      }
      // Node joins a repeated Mcp-Session-Id into `S, S`, which the session-keyed stages (the list
      // filter's 409 and answer reading) take for another session, while the upstream gets the raw
      // lines and a first-value reader (Starlette, Go's Header.Get) runs the request in session S.
      const session = ex.req.headers['mcp-session-id']
      if (session !== undefined && session.includes(',') && rawHeaderCount(ex.req.rawHeaders, 'mcp-session-id') > 1) {
        return TWO_SESSIONS
      }
      if (origin !== undefined && ex.req.method === 'OPTIONS' && ex.req.headers['access-control-request-method'] !== undefined) {
        return preflight(ex.req.headers['access-control-request-headers'])
      }
      return CONTINUE
    },
  }
}

/** The names the official SDK treats as loopback (hostHeaderValidation's localhost list), with any port. */
const LOOPBACK_HOST = /^(?:localhost|127\.0\.0\.1|\[::1\])(?::\d{1,5})?$/
const LOOPBACK_ORIGIN = /^https?:\/\/(?:localhost|127\.0\.0\.1|\[::1\])(?::\d{1,5})?$/

/**
 * The request's own origin: `http://`, or `https://` on the gateway's own TLS listener, + the Host the browser
 * addressed (RFC 6454 §4: scheme, host, port; Host omits the port exactly when the origin does). Only
 * for a Host that is vouched for: allowed_hosts was checked (`hostsChecked`; the Host check runs
 * next) or it is a loopback name. Without that, a DNS-rebinding page (`http://evil.example:8080`
 * resolving to this gateway) would be same-origin with its own Host.
 */
function isSameOrigin(origin: string, host: string | undefined, hostsChecked: boolean, encrypted: boolean): boolean {
  const scheme = encrypted ? 'https://' : 'http://'
  if (host === undefined || origin.length !== host.length + scheme.length || !origin.startsWith(scheme)) return false
  const lowerHost = host.toLowerCase()
  return origin.endsWith(lowerHost) && (hostsChecked || LOOPBACK_HOST.test(lowerHost))
}

function forbidden(code: 'http.host' | 'http.origin', what: string, value: string, key: string, message: string): Refusal {
  return { status: 403, decision: 'error', code, reason: `${what} ${shorten(value)} not in ${key}`, message }
}

/** A caller's header value for an audit reason, cut short. */
function shorten(value: string): string {
  return value.length > MAX_REASON_VALUE ? `${value.slice(0, MAX_REASON_VALUE)}…` : value
}

const NO_HOST: Refusal = {
  status: 403,
  decision: 'error',
  code: 'http.host',
  reason: 'no host header (allowed_hosts is set)',
  message: 'Forbidden: host not allowed',
}

/** RFC 9112 §3.2: a server MUST answer 400 to more than one Host; which one counts is anyone's guess. */
const TWO_HOSTS: Refusal = {
  status: 400,
  decision: 'error',
  code: 'http.host',
  reason: 'more than one host header',
  message: 'Bad request: more than one Host header',
}

/** MCP Streamable HTTP: one session per request; two Mcp-Session-Id lines are read differently by different servers. */
const TWO_SESSIONS: Refusal = {
  status: 400,
  decision: 'error',
  code: 'http.header',
  reason: 'more than one mcp-session-id header',
  message: 'Bad request: more than one Mcp-Session-Id header',
}

interface HostMatcher {
  check(ex: Exchange): Refusal | null
}

/** Null when allowed_hosts is empty (any Host). Entries are split once into exact host:port and any-port names. */
function hostMatcher(allowedHosts: readonly string[]): HostMatcher | null {
  if (allowedHosts.length === 0) return null
  const exact = new Set<string>()
  const anyPort = new Set<string>()
  for (const entry of allowedHosts) {
    const { name, port } = splitHost(entry)
    if (port === null) anyPort.add(canonicalName(name))
    else exact.add(`${canonicalName(name)}:${port}`)
  }
  return {
    check(ex: Exchange): Refusal | null {
      const host = ex.req.headers.host
      if (host === undefined || host === '') return NO_HOST
      if (rawHeaderCount(ex.req.rawHeaders, 'host') > 1) return TWO_HOSTS
      const value = host.toLowerCase()
      if (exact.has(value)) return null
      const { name, port } = splitHost(value)
      // A port-less entry accepts any port, but only a port: `example.com:abc` or `example.com:` would
      // reach the upstream as an X-Forwarded-Host no URL can be built from.
      if ((port === null || PORT.test(port)) && anyPort.has(name)) return null
      return forbidden('http.host', 'host', host, 'allowed_hosts', 'Forbidden: host not allowed')
    },
  }
}

const PORT = /^\d{1,5}$/

/** `name` keeps an IPv6 literal's brackets; `port` is null without a `:` (and '' after a bare one). */
function splitHost(host: string): { name: string; port: string | null } {
  const colon = host.charCodeAt(0) === 91 /* [ */ ? host.indexOf(':', host.indexOf(']')) : host.indexOf(':')
  return colon < 0 ? { name: host, port: null } : { name: host.slice(0, colon), port: host.slice(colon + 1) }
}

/** Browsers send an IPv6 literal in its shortest form ([::1]); a config entry may spell it out. */
function canonicalName(name: string): string {
  return name.startsWith('[') && URL.canParse(`http://${name}`) ? new URL(`http://${name}`).hostname : name
}

const PREFLIGHT_REASON = 'CORS preflight answered by the gateway'

const PREFLIGHT: Refusal = {
  status: 204,
  decision: 'passthrough',
  code: 'http.preflight',
  reason: PREFLIGHT_REASON,
  message: '',
  headers: PREFLIGHT_HEADERS,
  noBody: true,
}

/**
 * The 204 to a preflight from a listed origin (the gateway adds Access-Control-Allow-Origin and Vary
 * to every answer for one). Requested headers are allowed only when every one is on the list; else
 * Access-Control-Allow-Headers is left out, so the browser refuses the actual request itself.
 */
function preflight(requested: string | undefined): Refusal {
  if (requested === undefined || requested.trim() === '') return PREFLIGHT
  const names = requested
    .toLowerCase()
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '')
  const refused = names.find(
    (name) => !ALLOWED_REQUEST_HEADERS.has(name) && !(name.startsWith(PARAM_HEADER_PREFIX) && name.length > PARAM_HEADER_PREFIX.length),
  )
  if (refused !== undefined) {
    return { ...PREFLIGHT, reason: `${PREFLIGHT_REASON}; request header ${shorten(refused)} not allowed, so none are` }
  }
  return { ...PREFLIGHT, headers: { ...PREFLIGHT_HEADERS, 'access-control-allow-headers': names.join(', ') } }
}
