import type { Exchange } from '../pipeline/exchange'

/**
 * MCP 2026-07-28 ("Subscriptions"): a request whose answer is an SSE stream that stays open and carries
 * change notifications until the client closes it. It replaces the standalone GET stream.
 */
export const SUBSCRIPTIONS_LISTEN = 'subscriptions/listen'

/**
 * True for a request whose answer is a stream that stays open as long as the client listens: a GET
 * (the standalone SSE stream of earlier revisions, legacy /sse) or a lone subscriptions/listen request.
 * The upstream gives such requests a connection outside the bounded call pool (upstream/forward.ts).
 */
export function isStream(ex: Exchange): boolean {
  if (ex.req.method === 'GET') return true
  const call = ex.single
  return call !== null && call.method === SUBSCRIPTIONS_LISTEN && call.id !== undefined
}
