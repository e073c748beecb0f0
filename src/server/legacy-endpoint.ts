import { AnswerRefused } from '../pipeline/answer'
import { CONTINUE, type Stage } from '../pipeline/stage'
import { MESSAGE_PATH, SERVERS_PATH } from './router'

/**
 * A `transport: sse` server (the HTTP+SSE transport of MCP 2024-11-05) names, in its GET stream's
 * `endpoint` event, the URL the client must POST its messages to: `/messages?sessionId=…` (TypeScript
 * SDK), `/messages/?session_id=…` (Python SDK), or any URL, relative to the stream's. Passed on as it
 * is, the client would resolve it against the gateway's `/mcp/<name>` and POST past that server's
 * name, or, absolute, straight to the server. This reader of the route's GET streams rewrites it to
 * the path below `/mcp/<name>` that the router sends back to that server's origin (router.ts
 * `upstreamPath`): `/messages?sessionId=X` becomes `/mcp/<name>/messages?sessionId=X`.
 *
 * Every event whose data is not a JSON-RPC message is read as an endpoint, not only the first: the
 * official client takes each `endpoint` event as the new URL to POST to, so a later one must not
 * escape either (an event's type does not reach the readers; only endpoint events carry a URL). An
 * endpoint the router could not send back to this server (another origin, or a path it refuses:
 * percent-encoding, dot segments) must not reach the client: the stream is ended as the upstream's
 * failure (AnswerRefused), audited `upstream.failed` with why.
 *
 * With `message_path` set, an endpoint naming another path is refused the same way: the router sends
 * POSTs to that path alone.
 *
 * Only in the chains of `sse` routes: a streamable route's streams, and `upstream:`, where every path
 * is forwarded as it is, pass untouched.
 */
export function legacyEndpointStage(server: string, serverUrl: string, messagePath: string | null = null): Stage {
  const base = new URL(serverUrl)
  const prefix = `${SERVERS_PATH}/${server}`
  return {
    name: 'legacy-endpoint',
    answers: { methods: [], reads: 'messages', streams: true },
    run: () => CONTINUE,
    onMessage: (_ex, data) => routedEndpoint(data, base, prefix, messagePath),
  }
}

/**
 * The data of one event of a legacy stream as the client must see it: a JSON-RPC message or an empty
 * data (which no client dispatches) as it is; an endpoint URL, resolved against the server's URL as
 * the client would resolve it, as the same path and query below `prefix`. Throws AnswerRefused when
 * that URL cannot be reached through the gateway.
 */
export function routedEndpoint(data: string, server: URL, prefix: string, messagePath: string | null = null): string {
  if (data === '' || isJsonMessage(data)) return data
  let url: URL
  try {
    url = new URL(data, server)
  } catch {
    throw new AnswerRefused(`the endpoint event names no URL (${shown(data)})`)
  }
  if (url.origin !== server.origin) {
    throw new AnswerRefused(
      `the endpoint event names ${shown(url.origin)}, another origin than the server's (${server.origin}): the client's messages would not come through the gateway`,
    )
  }
  if (!MESSAGE_PATH.test(url.pathname)) {
    throw new AnswerRefused(
      `the endpoint event names the path ${shown(url.pathname)}, which the gateway does not route (an empty or dot segment, or percent-encoding)`,
    )
  }
  // With message_path the router takes POSTs at that path alone: a stream naming another would leave
  // its client with a URL that answers 404.
  if (messagePath !== null && url.pathname !== messagePath) {
    throw new AnswerRefused(`the endpoint event names the path ${shown(url.pathname)}, not the server's message_path ${shown(messagePath)}`)
  }
  // The fragment is the client's own (never sent): dropped, as fetch drops it.
  return prefix + url.pathname + url.search
}

/** True when the data is a JSON-RPC message (an object or a batch), JSON's leading whitespace allowed. */
function isJsonMessage(data: string): boolean {
  for (let i = 0; i < data.length; i++) {
    const c = data.charCodeAt(i)
    if (c === 0x7b || c === 0x5b) return true
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false
  }
  return false
}

/** Text of the upstream's, quoted and bounded, for the audit reason. */
function shown(text: string): string {
  return JSON.stringify(text.length > 200 ? `${text.slice(0, 200)}…` : text)
}
