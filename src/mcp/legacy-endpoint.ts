/**
 * The query parameters of a legacy /sse stream's endpoint event (MCP 2024-11-05: its data is the URL
 * the client POSTs to, `/messages?sessionId=…` from the TypeScript SDK, `/messages/?session_id=…` from
 * the Python SDK), or null for any other event, whose data is a JSON-RPC message, and for a URL
 * without a query. The one reading of it for every stage that learns a stream's session.
 */
export function endpointParameters(data: string): URLSearchParams | null {
  if (data.startsWith('{') || data.startsWith('[')) return null
  const q = data.indexOf('?')
  return q < 0 ? null : new URLSearchParams(data.slice(q + 1))
}
