import { policyServerWarnings } from './policy'
import type { Config } from './types'

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
  warnings.push(
    ...policyServerWarnings(
      config.policy,
      config.servers.map((s) => s.name),
    ),
  )
  return warnings
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
