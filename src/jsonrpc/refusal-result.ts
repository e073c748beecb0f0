import type { ServerResponse } from 'node:http'
import type { Exchange } from '../pipeline/exchange'
import type { Refusal } from '../pipeline/stage'
import { sseMessageEvent, writeLocalBody } from '../pipeline/reply'

/**
 * `tool_refusals: result`: a refused tools/call answered the way MCP reports a tool error the model
 * should see (a CallToolResult with `isError: true`, MCP 2025-06-18 "Tools", error handling), instead
 * of an HTTP error that clients throw and agent hosts show the model as a generic failure.
 *
 * The JSON-RPC message text, or null when this refusal cannot be a result: only a request whose body
 * is one tools/call with an id (a batch would need an answer per element; a notification gets none),
 * refused by a stage that wrote `agentText` (budget, loop breaker, policy, concurrency cap). The
 * result's `_meta` is the refusal's `agentMeta` (else its `data`: retry_after_seconds, bucket) plus
 * the decision. Transport-independent: the legacy SSE transport delivers the same text on its stream.
 *
 * The result has the shape of the revision the request speaks (requestRevision): from MCP 2026-07-28
 * on, every result names its kind in `resultType` ("complete" for a finished call; 2026-07-28
 * "Result types"), and a client of that revision refuses a result without it (the official SDK v2
 * throws INVALID_RESULT "missing required resultType"); a client of an earlier revision gets the
 * result as those revisions define it, without the member.
 */
export function refusalResultMessage(ex: Exchange, refusal: Refusal): string | null {
  const text = refusal.agentText
  const call = ex.single
  if (text === undefined || call === null || call.method !== 'tools/call' || call.id === undefined) return null
  const meta = { ...(refusal.agentMeta ?? refusal.data), decision: refusal.decision }
  const result = { content: [{ type: 'text', text }], isError: true, _meta: meta }
  return JSON.stringify({
    jsonrpc: '2.0',
    id: call.id,
    result: speaksResultTypes(requestRevision(ex)) ? { resultType: 'complete', ...result } : result,
  })
}

/** The first revision whose results carry `resultType`. */
const RESULT_TYPE_REVISION = '2026-07-28'

/** Where a 2026-07-28 request names its revision in `params._meta` ("Request Metadata"). */
const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion'

/** A revision is a date, YYYY-MM-DD; so they compare as text. */
const REVISION = /^\d{4}-\d{2}-\d{2}$/

function speaksResultTypes(revision: string | null): boolean {
  return revision !== null && REVISION.test(revision) && revision >= RESULT_TYPE_REVISION
}

/**
 * The MCP revision a request speaks, or null when it names none (a 2025-03-26 client, a hand-written
 * call): its `MCP-Protocol-Version` header when that holds one revision (every Streamable HTTP request
 * after initialization carries it: 2025-06-18 "Transports", protocol version header), else the
 * `io.modelcontextprotocol/protocolVersion` of its `params._meta`, which every 2026-07-28 request
 * carries and which must equal the header when both are there (when they differ the request is the
 * client's error; the header, what proxies route on, decides here). The body is parsed only on this
 * refused path and only without that header (the request phase reads no `_meta`); it holds one
 * tools/call the scanner accepted, within max_body_bytes.
 */
function requestRevision(ex: Exchange): string | null {
  const header = ex.req.headers['mcp-protocol-version']
  if (typeof header === 'string' && REVISION.test(header.trim())) return header.trim()
  if (ex.body === null) return null
  try {
    const message = JSON.parse(ex.body.toString('utf8')) as { params?: { _meta?: Record<string, unknown> } }
    const revision = message.params?._meta?.[PROTOCOL_VERSION_META_KEY]
    return typeof revision === 'string' ? revision : null
  } catch {
    return null // the scanner accepted it, so this does not happen; a refusal must not fail on it
  }
}

export type ResultFormat = 'json' | 'sse'

/**
 * How a Streamable HTTP POST accepts its answer, from its Accept header: SSE when it lists
 * text/event-stream and no range that covers application/json, else JSON; null when it lists neither
 * type by name. A Streamable HTTP client must list both (MCP 2025-06-18 "Transports", sending messages
 * to the server), and an SDK server answers 406 otherwise, so null means another transport: the legacy
 * HTTP+SSE transport's POSTs (`*\/*` or no Accept), whose answers travel on the GET /sse stream and
 * whose POST bodies no client reads. A range with q=0 is "not acceptable" (RFC 9110 §12.4.2).
 */
export function resultFormat(accept: string | undefined): ResultFormat | null {
  if (accept === undefined) return null
  let json = false
  let jsonByName = false
  let sse = false
  for (const item of accept.split(',')) {
    const semi = item.indexOf(';')
    const type = (semi < 0 ? item : item.slice(0, semi)).trim().toLowerCase()
    if (semi >= 0 && /;\s*q\s*=\s*0(?:\.0{0,3})?\s*(?:;|$)/i.test(item.slice(semi))) continue
    if (type === 'text/event-stream') sse = true
    else if (type === 'application/json') json = jsonByName = true
    else if (type === 'application/*' || type === '*/*') json = true
  }
  if (sse && !json) return 'sse'
  return sse || jsonByName ? 'json' : null
}

/**
 * Writes a result message as the whole response: HTTP 200, as JSON or as one SSE `message` event (the
 * event type the Streamable HTTP transport uses). Like every local answer it never carries
 * Mcp-Session-Id (the official client would take it as a new session).
 */
export function writeResult(res: ServerResponse, message: string, format: ResultFormat, headers?: Readonly<Record<string, string>>): void {
  if (format === 'json') writeLocalBody(res, 200, 'application/json', message, headers)
  else writeLocalBody(res, 200, 'text/event-stream', sseMessageEvent(message), headers)
}
