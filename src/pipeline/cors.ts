import type { ServerResponse } from 'node:http'

/**
 * What every response to a listed browser origin says, whoever made it (a refusal, a failure, the
 * upstream), so a browser MCP client reads a 401, 403 or 429 instead of an opaque network error.
 * Shared by the http stage (preflights), the gateway (local answers) and the relay (forwarded answers).
 *
 * Without Access-Control-Expose-Headers a browser hides every response header outside the CORS
 * safelist: the session id, the challenge of a 401 and the Retry-After of a 429 among them.
 */
export const CORS_EXPOSE_HEADERS =
  'mcp-session-id, mcp-protocol-version, www-authenticate, retry-after, ratelimit, ratelimit-policy, x-wardline-request-id'

/** Sets the CORS headers on a response the gateway makes itself (before its head is written). */
export function setCorsHeaders(res: ServerResponse, origin: string): void {
  res.setHeader('access-control-allow-origin', origin)
  res.setHeader('vary', 'Origin')
  res.setHeader('access-control-expose-headers', CORS_EXPOSE_HEADERS)
}

/**
 * Appends the CORS headers to a relayed response's flat [name, value, …] list. Vary is added beside
 * any the upstream sent (several Vary lines make one list), never in place of it.
 */
export function pushCorsHeaders(out: string[], origin: string): void {
  out.push('access-control-allow-origin', origin, 'vary', 'Origin', 'access-control-expose-headers', CORS_EXPOSE_HEADERS)
}
