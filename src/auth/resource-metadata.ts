import type { AuthConfig, ResourceMetadata } from '../config/types'
import type { Exchange } from '../pipeline/exchange'

/** Where RFC 9728 §3.1 puts a protected resource's metadata: this segment, then the resource's path. */
export const PROTECTED_RESOURCE = '/.well-known/oauth-protected-resource'

/**
 * The resource identifier of server `name` (`servers:`): the configured `auth.resource_metadata.resource`
 * with its path's last `/mcp` segment (and any trailing `/`) replaced by `/mcp/<name>`, its query dropped.
 * `https://mcp.example.com/mcp` gives `https://mcp.example.com/mcp/docs`; a bare origin, or a prefix a
 * proxy in front adds (`https://example.com/tools`), gets `/mcp/<name>` appended. So each server's
 * resource is the URL its clients use, which the official SDK client requires (the resource must be
 * the server URL or a path above it).
 */
export function serverResource(resource: string, name: string): string {
  const url = new URL(resource)
  const base = url.pathname.replace(/\/+$/, '').replace(/\/mcp$/, '')
  return `${url.origin}${base}/mcp/${name}`
}

/**
 * The metadata URL a 401 for server `name` advertises: the configured `auth.resource_metadata_url` with
 * everything after its `/.well-known/oauth-protected-resource` segment replaced by `/mcp/<name>`, the
 * document the gateway serves for that server. Null when the configured URL has no such segment (a
 * document hosted elsewhere, whose paths the gateway does not know): the 401 then keeps it as it is.
 */
export function serverMetadataUrl(resourceMetadataUrl: string, name: string): string | null {
  const url = new URL(resourceMetadataUrl)
  const at = url.pathname.indexOf(PROTECTED_RESOURCE)
  if (at < 0) return null
  return `${url.origin}${url.pathname.slice(0, at + PROTECTED_RESOURCE.length)}/mcp/${name}`
}

/** The RFC 9728 document for `resource`: the configured fields, with `resource` given. */
export function metadataDocument(metadata: ResourceMetadata, resource: string): string {
  return JSON.stringify({
    resource,
    authorization_servers: metadata.authorizationServers,
    ...(metadata.scopesSupported.length ? { scopes_supported: metadata.scopesSupported } : {}),
    bearer_methods_supported: ['header'],
  })
}

/**
 * The `WWW-Authenticate` challenge (without error parameters) a request gets: `resource_metadata`
 * names the configured URL, or, for a request to `/mcp/<name>` while the gateway serves the metadata
 * itself, that server's document, so an OAuth client asks for a token for that server's resource.
 * `/mcp` (the default server) and `upstream:` alone keep the configured URL. Built once per server.
 */
export function bearerChallenge(config: AuthConfig): (ex: Exchange) => string {
  const configured = config.resourceMetadataUrl
  const plain = `Bearer realm="wardline"${configured ? `, resource_metadata="${configured}"` : ''}`
  if (configured === null || config.resourceMetadata === null) return () => plain
  const byServer = new Map<string, string>()
  return (ex) => {
    const name = ex.server
    if (name === null || !(ex.req.url ?? '').startsWith('/mcp/')) return plain
    let challenge = byServer.get(name)
    if (challenge === undefined) {
      const url = serverMetadataUrl(configured, name)
      challenge = url === null ? plain : `Bearer realm="wardline", resource_metadata="${url}"`
      byServer.set(name, challenge)
    }
    return challenge
  }
}
