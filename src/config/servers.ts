import { checkUrl } from './auth'
import { readHealthCheck } from './health-check'
import { type Node, type Reader, join } from './reader'
import { readBlock, readKey, readLeaf } from './read-node'
import { CONFIG_SPEC, MESSAGE_PATH, SERVER, SERVER_NAME, entryOf } from './spec'
import type { HealthCheckConfig, ServerConfig, UpstreamConfig } from './types'

const HEADER_VALUE = entryOf(SERVER.properties.headers)

/** RFC 9110 §5.6.2: a header name is a token. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/**
 * Header names a server's `headers:` may not set, each with why: the connection's own (RFC 9110
 * §7.6.1 hop-by-hop, Host, the body's framing), the session and protocol headers the client owns
 * and the gateway reads, and the identity headers only the gateway writes.
 */
const REFUSED_HEADERS: ReadonlyMap<string, string> = new Map([
  ...[
    'connection',
    'keep-alive',
    'proxy-connection',
    'transfer-encoding',
    'te',
    'trailer',
    'upgrade',
    'proxy-authenticate',
    'proxy-authorization',
  ].map((h) => [h, 'is hop-by-hop: it describes one connection and is never forwarded'] as const),
  ['host', 'is written by the gateway for the server it connects to'],
  ['content-length', 'is written by the gateway for the body it sends'],
  ['expect', 'is answered by the gateway, never forwarded'],
  ...['content-type', 'content-encoding', 'accept'].map(
    (h) => [h, "describes the client's own request (its body, or what it can read): one value for every request would break them"] as const,
  ),
  ...['x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'forwarded'].map(
    (h) => [h, "is written by the gateway (the client's address, Host and scheme, from a trusted proxy or the connection)"] as const,
  ),
  ...['mcp-session-id', 'mcp-protocol-version', 'mcp-method', 'mcp-name', 'last-event-id'].map(
    (h) => [h, "belongs to the client's session: the gateway reads it as the client sent it"] as const,
  ),
])

/** The names and values an upstream URL may carry: scheme, host, port and path only. */
function checkServerUrl(r: Reader, value: string, path: string): void {
  const parsed = checkUrl(r, value, path, ['http:', 'https:'])
  if (parsed === null) return
  if (parsed.username || parsed.password) r.note(path, 'must not carry credentials (send them with headers, which are never logged)')
  if (parsed.search || value.includes('?')) r.note(path, 'must not have a query (the query of each request is passed on)')
  if (parsed.hash || value.includes('#')) r.note(path, 'must not have a fragment')
}

/**
 * `servers:` (each server with its defaults applied) and `default_server`, or the one `upstream:`.
 * Every problem is noted, all at once: the two ways together, neither, a bad name, URL or header.
 */
export function readUpstreams(
  r: Reader,
  o: Node,
  defaults: Omit<UpstreamConfig, 'url'>,
): { upstream: UpstreamConfig | null; servers: ServerConfig[]; defaultServer: string | null } {
  // `upstream:` written blank still counts as written: beside servers it is one of the two to choose
  // between, and alone it is a missing URL, not "use servers".
  const upstreamWritten = Object.hasOwn(o, 'upstream')
  const hasServers = o.servers !== undefined && o.servers !== null
  const servers = readServers(r, o.servers, 'servers', {
    ...defaults,
    // upstream_health_check.url names one server's health URL: each server probes its own URL unless
    // its health_check says otherwise (the rest of the block is a fine default for all of them).
    healthCheck: defaults.healthCheck === null ? null : { ...defaults.healthCheck, url: null },
  })
  const defaultServer = readKey(r, CONFIG_SPEC, o, 'default_server', '') as string | null
  if (upstreamWritten && hasServers) {
    r.note(
      'upstream',
      'and servers cannot both be set: keep upstream for one server (every path forwarded to it), or move it into servers as a named entry (reached at /mcp/<name>; default_server also serves it at /mcp)',
    )
  } else if (!hasServers && (!upstreamWritten || o.upstream === null)) {
    r.note('upstream', 'is required (the MCP server URL, e.g. http://127.0.0.1:3001), or servers to name several')
  } else if (hasServers && servers.length === 0 && !r.problems.some((p) => p.startsWith('servers'))) {
    r.note('servers', 'must name at least one server (or remove servers and set upstream)')
  }
  if (defaultServer !== null) {
    if (!hasServers) r.note('default_server', 'is only used with servers (with upstream, every path already goes to it)')
    else if (!servers.some((s) => s.name === defaultServer)) {
      r.note(
        'default_server',
        `must name one of servers (${servers.map((s) => s.name).join(', ') || 'none'}), not ${JSON.stringify(defaultServer)}`,
      )
    }
  }
  let upstream: UpstreamConfig | null = null
  if (upstreamWritten && o.upstream !== null) {
    const url = readKey(r, CONFIG_SPEC, o, 'upstream', '') as string | null
    if (url) {
      checkUrl(r, url, 'upstream', ['http:', 'https:'])
      // Only scheme, host, port and a base path are used: anything else would be silently dropped.
      const parsed = URL.canParse(url) ? new URL(url) : null
      if (parsed && (parsed.search || parsed.hash || parsed.username || parsed.password)) {
        r.note('upstream', 'must not have a query, a fragment or credentials (only scheme, host, port and a base path are used)')
      }
    }
    upstream = { ...defaults, url: (url ?? '').replace(/\/+$/, '') }
  }
  return { upstream: hasServers ? null : upstream, servers, defaultServer: hasServers ? defaultServer : null }
}

function readServers(r: Reader, value: unknown, at: string, defaults: Omit<UpstreamConfig, 'url'>): ServerConfig[] {
  const out: ServerConfig[] = []
  for (const [name, child] of Object.entries(r.map(value, at))) {
    const path = join(at, name)
    if (!SERVER_NAME.test(name)) {
      r.note(
        name === '' ? at : path,
        `${name === '' ? 'has an empty name, which' : ''} is not a valid server name: lower-case letters, digits, - and _, starting with a letter or digit, at most 32 characters (it is the path segment of /mcp/<name>)`.trimStart(),
      )
    }
    if (child === null || child === undefined) {
      r.note(join(path, 'url'), "is required (the server's MCP endpoint, e.g. http://127.0.0.1:3001/mcp)")
      continue
    }
    const o = readBlock(r, SERVER, child, path)
    const url = readKey<typeof SERVER, 'url'>(r, SERVER, o, 'url', path)
    if (o.url === undefined || o.url === null)
      r.note(join(path, 'url'), "is required (the server's MCP endpoint, e.g. http://127.0.0.1:3001/mcp)")
    else if (url) checkServerUrl(r, url, join(path, 'url'))
    // Blank reads as left out, as everywhere in the file.
    const healthCheck: HealthCheckConfig | null =
      o.health_check === undefined || o.health_check === null
        ? defaults.healthCheck
        : readHealthCheck(r, o.health_check, join(path, 'health_check'))
    out.push({
      name,
      url,
      transport: readKey(r, SERVER, o, 'transport', path),
      headers: readHeaders(r, o.headers, join(path, 'headers')),
      messagePath: readMessagePath(r, o, path),
      timeoutSeconds: readKey(r, SERVER, o, 'timeout_seconds', path, defaults.timeoutSeconds),
      connections: readKey(r, SERVER, o, 'connections', path, defaults.connections),
      healthCheck,
    })
  }
  return out
}

/** A server's headers, names lower-cased; a name given twice in two spellings is a problem, not a guess. */
function readHeaders(r: Reader, value: unknown, at: string): Record<string, string> {
  const out = Object.create(null) as Record<string, string>
  for (const [name, given] of Object.entries(r.map(value, at))) {
    const path = join(at, name)
    const lower = name.toLowerCase()
    if (!TOKEN.test(name)) {
      r.note(path, "is not a valid header name (letters, digits and !#$%&'*+.^_`|~-)")
      continue
    }
    const refused = REFUSED_HEADERS.get(lower) ?? (lower.startsWith('x-wardline-') ? 'is written by the gateway only' : null)
    if (refused !== null) {
      r.note(path, `cannot be set: ${refused}`)
      continue
    }
    if (Object.hasOwn(out, lower)) {
      r.note(path, `is given twice (header names are case-insensitive)`)
      continue
    }
    if (given === null || given === undefined) {
      r.note(path, 'must have a value (to send no such header, remove it)')
      continue
    }
    const text = readLeaf(r, HEADER_VALUE, given, path, '') as string
    // The value is a secret: the problem never shows it.
    if (text === '') continue // noted by readLeaf: empty, or its variable unset
    if (/[\0\r\n]/.test(text)) r.note(path, 'must not contain a line break or NUL (its value is not shown)')
    else if (text.trim() === '') r.note(path, 'must not be blank (only spaces)')
    else if (/[^\t\x20-\x7e\x80-\xff]/.test(text)) r.note(path, 'must be printable Latin-1 text (its value is not shown)')
    else out[lower] = text.trim()
  }
  return out
}

/** `message_path`: a plain absolute path, only for a legacy server. */
function readMessagePath(r: Reader, o: Node, path: string): string | null {
  const value = readKey(r, SERVER, o, 'message_path', path) as string | null
  if (value === null) return null
  const at = join(path, 'message_path')
  if (o.transport !== 'sse') r.note(at, 'is only used with transport: sse (a Streamable HTTP server has one endpoint, its url)')
  else if (!MESSAGE_PATH.test(value)) {
    r.note(at, 'must be a plain absolute path such as /messages (no query, no empty or dot segment, no percent-encoding)')
  }
  return value
}
