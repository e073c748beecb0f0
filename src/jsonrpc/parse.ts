import type { JsonRpcId, RpcCall } from '../pipeline/exchange'
import { INVALID_REQUEST, PARSE_ERROR, hasControlCharacters, isGatedMethod } from '../pipeline/methods'

export type ParseResult =
  | { ok: true; calls: RpcCall[]; batch: boolean }
  | { ok: false; code: number; id: JsonRpcId; reason: string }

/**
 * Parses a POST body as one JSON-RPC 2.0 message or a batch and classifies each message. Only the
 * fields the gateway needs are read; the original bytes are what gets forwarded.
 */
export function parseMessages(body: Buffer): ParseResult {
  let tree: unknown
  try {
    tree = JSON.parse(body.toString('utf8'))
  } catch (err) {
    return { ok: false, code: PARSE_ERROR, id: null, reason: `malformed JSON: ${(err as Error).message}` }
  }
  if (Array.isArray(tree)) {
    if (tree.length === 0) return { ok: false, code: INVALID_REQUEST, id: null, reason: 'empty batch' }
    const calls: RpcCall[] = []
    for (let i = 0; i < tree.length; i++) {
      const call = classify(tree[i])
      if (typeof call === 'string') return { ok: false, code: INVALID_REQUEST, id: null, reason: `batch element ${i}: ${call}` }
      calls.push(call)
    }
    return { ok: true, calls, batch: true }
  }
  const call = classify(tree)
  if (typeof call === 'string') return { ok: false, code: INVALID_REQUEST, id: readableId(tree), reason: call }
  return { ok: true, calls: [call], batch: false }
}

/** Returns the classified message, or a string saying why it is not valid JSON-RPC. */
function classify(message: unknown): RpcCall | string {
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return 'message is not a JSON object'
  const m = message as Record<string, unknown>
  if (m.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"'
  const hasId = 'id' in m
  if (hasId && !isId(m.id)) return 'id must be a string, a number or null'
  const id = hasId ? (m.id as JsonRpcId) : undefined
  if (m.method === undefined) {
    // A response from the client to a server-initiated request (sampling, elicitation, roots).
    if (!hasId || (!('result' in m) && !('error' in m))) return 'message has neither a method nor a result or error'
    return { id, method: '', target: '', gated: false, reason: '' }
  }
  if (typeof m.method !== 'string' || m.method === '') return 'method must be a non-empty string'
  const method = m.method
  if (hasControlCharacters(method)) return 'method contains control characters'
  const params = m.params
  if (params !== undefined && (typeof params !== 'object' || params === null)) return 'params must be an object or an array'
  const p = (params ?? {}) as Record<string, unknown>
  if (method === 'tools/call') {
    if (typeof p.name !== 'string' || p.name === '') return 'tools/call needs params.name as a non-empty string'
    return gatedCall(id, method, p.name)
  }
  // The target is the field the MCP server acts on: a resource's uri (its name is only a label the
  // caller can set to anything, so judging it would let a policy be bypassed), a prompt's name. A
  // list names nothing: whatever uri or name its caller adds is ignored upstream, so it is here too.
  if (!isGatedMethod(method)) return { id, method, target: '', gated: false, reason: '' }
  if (method.endsWith('/list')) return gatedCall(id, method, '')
  const target = method.startsWith('resources/') ? p.uri : p.name
  return gatedCall(id, method, typeof target === 'string' ? target : '')
}

function gatedCall(id: JsonRpcId | undefined, method: string, target: string): RpcCall | string {
  if (hasControlCharacters(target)) return `${method} target contains control characters`
  return { id, method, target, gated: true, reason: '' }
}

function isId(value: unknown): boolean {
  return value === null || typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value))
}

function readableId(tree: unknown): JsonRpcId {
  if (typeof tree === 'object' && tree !== null && 'id' in tree) {
    const id = (tree as { id: unknown }).id
    if (isId(id)) return id as JsonRpcId
  }
  return null
}
