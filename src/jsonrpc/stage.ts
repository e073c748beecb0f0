import type { Exchange } from '../pipeline/exchange'
import { PARSE_ERROR } from '../pipeline/methods'
import { CONTINUE, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { parseMessages } from './parse'
import { readBody } from './read-body'

function tooLarge(maxBodyBytes: number): Refusal {
  return {
  status: 413,
  decision: 'error',
  reason: `request body larger than max_body_bytes (${maxBodyBytes})`,
  message: 'Request body too large',
  data: { max_body_bytes: maxBodyBytes },
  headers: { connection: 'close' },
  }
}

/** A request that announces a body (RFC 9112 §6.3): a non-zero Content-Length or any Transfer-Encoding. */
function hasBody(ex: Exchange): boolean {
  const h = ex.req.headers
  return h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0')
}

/**
 * A body on GET, DELETE or OPTIONS carries no JSON-RPC and is never gated, but it is the client's:
 * forwarded as received (capped like any body) rather than silently dropped.
 */
async function readOpaqueBody(ex: Exchange, maxBodyBytes: number, tooLargeRefusal: Refusal): Promise<Verdict> {
  const read = await readBody(ex.req, maxBodyBytes)
  if (read.ok) {
    ex.body = read.body
    return CONTINUE
  }
  if (read.tooLarge) return tooLargeRefusal
  return { status: 400, decision: 'error', reason: read.error.message, message: 'Request body could not be read' }
}

/** The charset parameter of a Content-Type, lower-cased, or null when there is none. */
function charsetOf(contentType: string | undefined): string | null {
  if (contentType === undefined || !contentType.includes('=')) return null
  const m = CHARSET.exec(contentType)
  return m === null ? null : (m[1] ?? m[2]).toLowerCase()
}

const CHARSET = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i

/**
 * Reads the POST body (capped), parses it as JSON-RPC and records the calls on the Exchange. Other
 * methods carry no JSON-RPC and continue untouched.
 */
export function jsonRpcStage(maxBodyBytes: number): Stage {
  const tooLargeRefusal = tooLarge(maxBodyBytes)
  return {
    name: 'jsonrpc',
    async run(ex: Exchange) {
      if (ex.req.method !== 'POST') return hasBody(ex) ? readOpaqueBody(ex, maxBodyBytes, tooLargeRefusal) : CONTINUE
      const encoding = ex.req.headers['content-encoding']
      if (encoding !== undefined && encoding !== 'identity') {
        // A compressed body cannot be inspected, and an uninspected body must not pass a gate.
        return { status: 415, decision: 'error', reason: `content-encoding ${encoding} is not supported`, message: 'Compressed request bodies are not supported' }
      }
      const charset = charsetOf(ex.req.headers['content-type'])
      if (charset !== null && charset !== 'utf-8' && charset !== 'utf8') {
        // The gateway judges the body as UTF-8; an upstream that honours another charset (UTF-7, say)
        // would read other bytes, another tool name, than the one budget and policy judged.
        return { status: 415, decision: 'error', reason: `content-type charset ${charset} is not supported`, message: 'Request bodies must be UTF-8' }
      }
      const read = await readBody(ex.req, maxBodyBytes)
      if (!read.ok) {
        if (read.tooLarge) return tooLargeRefusal
        return { status: 400, decision: 'error', reason: read.error.message, message: 'Request body could not be read', rpcCode: PARSE_ERROR }
      }
      ex.body = read.body
      const parsed = parseMessages(read.body)
      if (!parsed.ok) {
        return {
          status: 400,
          decision: 'error',
          reason: parsed.reason,
          rpcCode: parsed.code,
          message: parsed.code === PARSE_ERROR ? 'Parse error' : 'Invalid Request',
          id: parsed.id,
        }
      }
      ex.calls = parsed.calls
      ex.batch = parsed.batch
      return CONTINUE
    },
  }
}
