import { setImmediate as yieldToLoop } from 'node:timers/promises'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, PARSE_ERROR, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { type ParseResult, classifyScan } from './parse'
import { BODY_CUT_OFF, type BodyResult, readBody } from './read-body'
import { JsonScanner, type ScanLimits } from '../json/scan'

export interface JsonRpcLimits extends ScanLimits {
  readonly maxBodyBytes: number
}

/**
 * Bytes scanned before the event loop gets a turn. A 4 MiB body is scanned in 64 slices, so the
 * calls of other callers interleave with it; a body below one slice (nearly every call) is scanned
 * in one go and never waits for a turn.
 */
const SLICE_BYTES = 64 * 1024

/** Parsed at once when the body fits in one slice (no promise), else slice by slice with a turn between. */
function parse(body: Buffer, limits: ScanLimits): ParseResult | Promise<ParseResult> {
  const scanner = new JsonScanner(body, limits)
  const scan = scanner.step(SLICE_BYTES)
  return scan === null ? parseSliced(body, scanner) : classifyScan(body, scan)
}

async function parseSliced(body: Buffer, scanner: JsonScanner): Promise<ParseResult> {
  for (;;) {
    await yieldToLoop()
    const scan = scanner.step(SLICE_BYTES)
    if (scan !== null) return classifyScan(body, scan)
  }
}

function tooLarge(maxBodyBytes: number): Refusal {
  return {
    status: 413,
    decision: 'error',
    code: 'body.too_large',
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
  return keepBody(ex, await readBody(ex.req, maxBodyBytes), tooLargeRefusal) ?? CONTINUE
}

/** Puts a body that was read whole on the Exchange (null), or says why it was not. */
function keepBody(ex: Exchange, read: BodyResult, tooLargeRefusal: Refusal): Refusal | null {
  if (read.ok) {
    ex.body = read.body
    return null
  }
  return read.tooLarge ? tooLargeRefusal : unreadable(ex, read.error)
}

/**
 * A body that stopped arriving. When request_timeout_seconds ran out, Node has already answered 408
 * on the socket and destroyed it with ERR_HTTP_REQUEST_TIMEOUT; when the body broke HTTP's framing (a
 * malformed chunk size), Node has answered 400 itself: the audit says so, with the status the client
 * got. A client that closed its connection got nothing: 499, as for any client that leaves first.
 */
function unreadable(ex: Exchange, err: Error): Refusal {
  const errored: NodeJS.ErrnoException | null = ex.req.socket.errored
  const code = errored?.code
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return {
      status: 408,
      decision: 'error',
      code: 'body.timeout',
      reason: 'request not received within request_timeout_seconds',
      message: 'Request timeout',
    }
  }
  // A connection that ends mid-body fails Node's parser with HPE_INVALID_EOF_STATE: a client that left.
  if (code?.startsWith('HPE_') && code !== 'HPE_INVALID_EOF_STATE') {
    return {
      status: 400,
      decision: 'error',
      code: 'body.unreadable',
      reason: `request body not valid HTTP/1.1 framing (${code}): answered 400 by Node, connection closed`,
      message: 'Bad request',
    }
  }
  if (ex.req.destroyed) {
    ex.aborted = true
    return { status: 499, decision: 'error', code: 'client.closed', reason: BODY_CUT_OFF, message: 'Client closed request' }
  }
  return {
    status: 400,
    decision: 'error',
    code: 'body.unreadable',
    reason: err.message,
    message: 'Request body could not be read',
    rpcCode: PARSE_ERROR,
  }
}

/**
 * The first charset parameter of a Content-Type that is not UTF-8, lower-cased, or null. Every one
 * is looked at: parsers disagree on which of two `charset=` counts (the SDK's takes the last).
 */
function foreignCharset(contentType: string | undefined): string | null {
  if (contentType === undefined || !contentType.includes('=')) return null
  for (const m of contentType.matchAll(CHARSET)) {
    const charset = (m[1] ?? m[2]).toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') return charset
  }
  return null
}

const CHARSET = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/gi

/**
 * Reads the POST body (capped), parses it as JSON-RPC and records the calls on the Exchange. Other
 * methods carry no JSON-RPC and continue untouched.
 */
export function jsonRpcStage(limits: JsonRpcLimits): Stage {
  const maxBodyBytes = limits.maxBodyBytes
  const tooLargeRefusal = tooLarge(maxBodyBytes)
  return {
    name: 'jsonrpc',
    run(ex: Exchange) {
      if (ex.req.method !== 'POST') return hasBody(ex) ? readOpaqueBody(ex, maxBodyBytes, tooLargeRefusal) : CONTINUE
      const encoding = ex.req.headers['content-encoding']
      if (encoding !== undefined && encoding !== 'identity') {
        // A compressed body cannot be inspected, and an uninspected body must not pass a gate.
        return {
          status: 415,
          decision: 'error',
          code: 'body.encoding',
          reason: `content-encoding ${encoding} is not supported`,
          message: 'Compressed request bodies are not supported',
        }
      }
      const charset = foreignCharset(ex.req.headers['content-type'])
      if (charset !== null) {
        // The gateway judges the body as UTF-8; an upstream that honours another charset (UTF-7, say)
        // would read other bytes, another tool name, than the one budget and policy judged.
        return {
          status: 415,
          decision: 'error',
          code: 'body.encoding',
          reason: `content-type charset ${charset} is not supported`,
          message: 'Request bodies must be UTF-8',
        }
      }
      return readBody(ex.req, maxBodyBytes).then((read) => {
        const unread = keepBody(ex, read, tooLargeRefusal)
        if (unread !== null) return unread
        const parsed = parse(ex.body as Buffer, limits)
        return parsed instanceof Promise ? parsed.then((p) => record(ex, p)) : record(ex, parsed)
      })
    },
  }
}

/** The calls of a parsed body on the Exchange, or the 400 of one that is not JSON-RPC. */
function record(ex: Exchange, parsed: ParseResult): Verdict {
  if (!parsed.ok) {
    return {
      status: 400,
      decision: 'error',
      code: 'jsonrpc.invalid',
      reason: parsed.reason,
      rpcCode: parsed.code,
      message: parsed.code === PARSE_ERROR ? 'Parse error' : 'Invalid Request',
      id: parsed.id,
    }
  }
  ex.calls = parsed.calls
  ex.batch = parsed.batch
  return CONTINUE
}
