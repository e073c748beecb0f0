import type { IncomingHttpHeaders } from 'node:http'

/** RFC 9110 §7.6.1: meaningful for one connection only, never forwarded. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
])

/**
 * Request headers never forwarded: hop-by-hop ones; host and content-length (undici writes its own for
 * the exact bytes we send); expect (Node already answered the client's 100-continue and the whole body
 * is in hand, and undici refuses to send the header at all, which would turn such requests into 502s: curl
 * sends it for large bodies); the caller's credentials (the gateway is the resource server, so the
 * upstream must not be able to replay them); and client-sent copies of the identity headers, which
 * only the gateway may set.
 */
const DROPPED_REQUEST = new Set([
  ...HOP_BY_HOP,
  'host',
  'content-length',
  'expect',
  'authorization',
  'x-wardline-identity',
  'x-wardline-tenant',
  'x-wardline-request-id',
  // Set by the gateway (forwarded.ts), never twice: from a trusted proxy the chain is extended, from
  // anyone else replaced, so a client cannot forge its address, Host or scheme. RFC 7239's Forwarded
  // says the same things, so it goes too (kept only from a trusted proxy).
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
  'forwarded',
])

/**
 * Request headers the gateway reads before it forwards (the session the list filter keys its 409 and
 * answer reading by; the MCP headers it compares with the body): forwarded as sent, but never in an
 * underscore spelling the gateway did not read.
 */
const READ_REQUEST = new Set(['mcp-session-id', 'mcp-protocol-version', 'mcp-method', 'mcp-name'])

/** Response headers the gateway answers for itself or that describe the upstream connection. */
const DROPPED_RESPONSE = new Set([...HOP_BY_HOP, 'x-wardline-request-id'])

/** Headers named by a Connection header are hop-by-hop too (RFC 9110 §7.6.1). */
function connectionTokens(value: string | string[] | undefined): Set<string> | null {
  if (value === undefined) return null
  // The usual value (keep-alive, close) names a header dropped anyway: no set to build per request.
  if (typeof value === 'string' && HOP_BY_HOP.has(value.toLowerCase())) return null
  const text = Array.isArray(value) ? value.join(',') : value
  const tokens = text
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean)
  return tokens.length > 0 ? new Set(tokens) : null
}

/**
 * Flat [name, value, …] list for undici, preserving the client's header order and repeats. `replaced`:
 * the lower-case names the gateway sends itself to this server (its configured headers): every client
 * copy of them is dropped, underscore spellings included.
 */
export function upstreamRequestHeaders(
  raw: readonly string[],
  parsed: IncomingHttpHeaders,
  replaced: ReadonlySet<string> | null = null,
): string[] {
  const named = connectionTokens(parsed.connection)
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase()
    if (DROPPED_REQUEST.has(name) || (named !== null && named.has(name))) continue
    if (replaced !== null && (replaced.has(name) || (name.includes('_') && replaced.has(name.replace(/_/g, '-'))))) continue
    // CGI-style upstreams read X_Wardline_Identity as X-Wardline-Identity: an underscore copy of a
    // dropped header would smuggle a forged identity past the gateway (nginx refuses such headers too).
    // The same goes for the headers the gateway reads to decide: an `Mcp_Session_Id` would put the
    // call in a session for such an upstream that the list filter, keyed by Mcp-Session-Id, never saw.
    if (name.includes('_')) {
      const dashed = name.replace(/_/g, '-')
      if (DROPPED_REQUEST.has(dashed) || READ_REQUEST.has(dashed)) continue
    }
    out.push(raw[i], raw[i + 1])
  }
  return out
}

/**
 * Flat [name, value, …] list for writeHead from undici's parsed response headers. Headers the gateway
 * sets itself (`own`, lower-case names: its RateLimit fields) replace the upstream's: two RateLimit
 * fields naming the same "identity" item would leave a client to guess which one binds. With `cors`
 * (a listed browser origin) every Access-Control-* header of the upstream goes: the gateway's CORS
 * policy answers for the origin it checked, and an upstream's `*` or other origin must not widen it.
 */
export function clientResponseHeaders(
  headers: IncomingHttpHeaders,
  own: Readonly<Record<string, string>> | null = null,
  cors = false,
): string[] {
  const named = connectionTokens(headers.connection)
  const out: string[] = []
  for (const name in headers) {
    if (DROPPED_RESPONSE.has(name) || (named !== null && named.has(name)) || (own !== null && Object.hasOwn(own, name))) continue
    if (cors && name.startsWith('access-control-')) continue
    const value = headers[name]
    if (value === undefined) continue
    if (Array.isArray(value)) for (const v of value) out.push(name, v)
    else out.push(name, value)
  }
  return out
}
