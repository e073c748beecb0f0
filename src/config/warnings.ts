import { policyServerWarnings } from './policy'
import type { Config, ServerTransport } from './types'

/**
 * The paths MCP clients call: Streamable HTTP's one endpoint and the legacy HTTP+SSE stream, as the
 * official SDKs' examples and most servers' READMEs name them (`http://host:3001/mcp`).
 */
const CLIENT_PATHS = ['/mcp', '/sse']

/**
 * What a valid file most likely gets wrong, said by `check-config` and logged at startup, with what to
 * write instead. Not errors: each has a legitimate use, but it is rare next to the mistake.
 */
export function configWarnings(config: Config): string[] {
  const warnings: string[] = []
  const upstream = config.upstream === null ? null : upstreamPathWarning(config.upstream.url)
  if (upstream !== null) warnings.push(upstream)
  for (const server of config.servers) {
    const warning = serverUrlWarning(server.name, server.url, server.transport)
    if (warning !== null) warnings.push(warning)
    if (server.transport === 'sse' && server.messagePath === null) warnings.push(messagePathWarning(server.name))
  }
  warnings.push(
    ...policyServerWarnings(
      config.policy,
      config.servers.map((s) => s.name),
    ),
  )
  return warnings
}

/**
 * A server's `url` is its MCP endpoint itself, path included (server/router.ts sends /mcp/<name> to
 * exactly that path), unlike `upstream:`, a base the request path is appended to. Written as a base
 * (`http://h:3001`, no path), every call reaches the server's `/`, which most servers answer 404:
 * they serve MCP at /mcp, or /sse for the legacy transport. And a Streamable HTTP client speaking to a
 * URL ending in /sse is most often a legacy server whose `transport: sse` was left out.
 */
export function serverUrlWarning(name: string, url: string, transport: ServerTransport): string | null {
  if (!URL.canParse(url)) return null
  const parsed = new URL(url)
  const key = `servers.${name}.url`
  if (parsed.pathname === '/') {
    const usual = transport === 'sse' ? '/sse' : '/mcp'
    return (
      `${key} ${url} has no path: it is the server's MCP endpoint, path included, so every call to /mcp/${name} goes to ` +
      `${parsed.origin}/ itself; most servers serve MCP at ${usual}: write url: ${parsed.origin}${usual} ` +
      `(keep it only if the server answers MCP at /)`
    )
  }
  if (transport === 'streamable' && /\/sse\/?$/.test(parsed.pathname)) {
    return (
      `${key} ${url} ends with /sse, the legacy HTTP+SSE transport's stream, but servers.${name}.transport is streamable ` +
      `(the default): for a legacy server write transport: sse (keep it if this server speaks Streamable HTTP at that path)`
    )
  }
  return null
}

/**
 * The gateway forwards a request to the upstream's path followed by the request's own
 * (upstream/forward.ts: `basePath + req.url`; the config drops a trailing `/`). A client calling the
 * gateway at `/mcp` with `upstream: http://h:3001/mcp` therefore reaches `/mcp/mcp`, which a server
 * answers 404. Only a client calling the gateway at `/` itself would want that upstream.
 */
export function upstreamPathWarning(url: string): string | null {
  const parsed = new URL(url)
  const path = parsed.pathname.replace(/\/+$/, '')
  // Case-sensitive, as servers match paths: `/MCP` is not the path clients call.
  const clientPath = CLIENT_PATHS.find((p) => path.endsWith(p))
  if (clientPath === undefined) return null
  const base = parsed.origin + path.slice(0, path.length - clientPath.length)
  return (
    `upstream ${url} ends with ${clientPath}, the path clients call: the gateway appends each request's path to the upstream's, ` +
    `so a call to <gateway>${clientPath} goes to ${url}${clientPath} and gets 404; write upstream: ${base} ` +
    `(keep it only if clients call the gateway at / itself)`
  )
}

/**
 * A legacy server's messages are POSTed to a path below /mcp/<name> that its stream names; without
 * `message_path` the router sends a POST at any plain path there to the server's origin, with the
 * server's headers. Allowed (the caller is still authenticated, judged, counted and audited), but the
 * credential then reaches more of that origin than its MCP endpoint.
 */
export function messagePathWarning(name: string): string {
  return (
    `servers.${name} (transport: sse) has no message_path: a POST at any path below /mcp/${name}/ is sent to that path on the server's origin, ` +
    `with its headers; set servers.${name}.message_path to the path its endpoint event names (/messages for the TypeScript SDK, /messages/ for the Python SDK)`
  )
}
