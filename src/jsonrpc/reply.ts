import type { ServerResponse } from 'node:http'
import type { JsonRpcId } from '../pipeline/exchange'

/**
 * Writes a response the gateway makes itself: always application/json with a JSON-RPC error body
 * (DESIGN.md, "Responses the gateway makes itself"). Never carries Mcp-Session-Id: the official
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
  if (res.headersSent) {
    res.destroy()
    return
  }
  const error = data === undefined ? { code, message } : { code, message, data }
  const body = JSON.stringify({ jsonrpc: '2.0', id, error })
  res.statusCode = status
  if (headers) for (const name in headers) res.setHeader(name, headers[name])
  res.setHeader('content-type', 'application/json')
  res.setHeader('content-length', Buffer.byteLength(body))
  res.end(body)
}
