import type { ServerResponse } from 'node:http'
import type { JsonRpcId } from './exchange'

/**
 * Writes a response the gateway makes itself: always application/json with a JSON-RPC error body
 * (docs/gateway.md, "Responses the gateway makes itself"). Never carries Mcp-Session-Id: the official
 * client overwrites its session from any response.
 */
export function writeRpcError(
  res: ServerResponse,
  status: number,
  id: JsonRpcId,
  code: number,
  message: string,
  data?: Readonly<Record<string, unknown>>,
  headers?: Readonly<Record<string, string>>,
): void {
  const error = data === undefined ? { code, message } : { code, message, data }
  writeLocalBody(res, status, 'application/json', JSON.stringify({ jsonrpc: '2.0', id, error }), headers)
}

/**
 * Writes a whole local answer at once: status, the given headers, Content-Type and Content-Length, then
 * the body. A response whose head already went out cannot take another: it is cut instead.
 */
export function writeLocalBody(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  headers?: Readonly<Record<string, string>>,
): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  res.statusCode = status
  if (headers) for (const name in headers) res.setHeader(name, headers[name])
  res.setHeader('content-type', contentType)
  res.setHeader('content-length', Buffer.byteLength(body))
  res.end(body)
}

/**
 * One JSON-RPC message as an SSE `message` event, the event type MCP's SSE transports use.
 * JSON.stringify escapes every line break JSON can hold, so the message is one data line.
 */
export function sseMessageEvent(message: string): string {
  return `event: message\ndata: ${message}\n\n`
}
