import type { IncomingMessage } from 'node:http'
import { rawHeaderCount } from '../raw-headers'
import type { Exchange, RpcCall } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage } from '../pipeline/stage'
import { quoted } from '../mcp/resource-uri'

/**
 * JSON-RPC code for headers that disagree with the body (MCP 2026-07-28, Streamable HTTP, "Server
 * Validation": `HeaderMismatch`, with HTTP 400).
 */
export const HEADER_MISMATCH = -32020

/** The methods whose Mcp-Name the revision requires (Streamable HTTP, "Standard Request Headers"). */
const NAME_REQUIRED = new Set(['tools/call', 'resources/read', 'prompts/get'])

/** MCP 2026-07-28, "Value Encoding": a value outside plain header-safe ASCII travels as `=?base64?…?=`. */
const SENTINEL_START = '=?base64?'
const SENTINEL_END = '?='
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
const UTF8 = new TextDecoder('utf-8', { fatal: true })

/**
 * MCP 2026-07-28 mirrors the JSON-RPC method into `Mcp-Method` and the target of tools/call,
 * resources/read and prompts/get into `Mcp-Name`, so that intermediaries can route and rate-limit on
 * headers without reading the body. Whoever acts on a header must see the same call the gateway
 * judged and the upstream runs, so a request whose headers disagree with its body is refused here:
 * 400, JSON-RPC -32020 (HeaderMismatch), never forwarded, one audit entry (decision `error`). The
 * revision requires servers to refuse such requests too; refusing before the audit reservation and
 * the budget means a mismatch costs the caller nothing (its concurrency slot is given back at once).
 *
 * Checked only when either header is present (clients of earlier revisions, and the SDK 1.x, send
 * neither), so a request without them pays two header lookups:
 * - each header at most once (Node joins repeats with ", ", which a proxy reading the first copy
 *   would not see);
 * - one message per POST: the revision has no batches, and one Mcp-Method cannot describe several;
 * - Mcp-Method present, equal to the body's method, case and all; plain visible ASCII;
 * - Mcp-Name, plain or base64-encoded (decoded before comparing, as the revision requires), equal to
 *   the call's target (the `params.name` or `params.uri` the gateway judges), and absent from a call
 *   with no target; required with tools/call, resources/read and prompts/get once Mcp-Method is sent,
 *   and Mcp-Method required with Mcp-Name.
 *
 * `Mcp-Param-*` headers mirror tool arguments a tool's inputSchema marks with `x-mcp-header`; the
 * gateway does not read tool schemas, so it forwards them unchanged and leaves their validation to
 * the MCP server (the revision: intermediaries that do not recognise one MUST forward it).
 */
export function mcpHeadersStage(): Stage {
  return {
    name: 'mcp-headers',
    run(ex: Exchange) {
      if (ex.req.method !== 'POST') return CONTINUE
      const headers = ex.req.headers
      const method = headers['mcp-method']
      const name = headers['mcp-name']
      if (method === undefined && name === undefined) return CONTINUE
      // Node joins repeats of these headers into one string; only set-cookie ever comes as an array.
      return headerProblem(ex, joined(method), joined(name)) ?? CONTINUE
    },
  }
}

function headerProblem(ex: Exchange, method: string | undefined, name: string | undefined): Refusal | null {
  const repeated = repeatedHeader(ex.req)
  if (repeated !== null) return mismatch(repeated, `${repeated} header sent more than once`)
  if (ex.batch) {
    const header = method !== undefined ? 'Mcp-Method' : 'Mcp-Name'
    return mismatch(header, `${header} header ${quoted(method ?? (name as string))} on a batch (this revision sends one message per POST)`)
  }
  const call = ex.calls[0]
  if (method === undefined) return mismatch('Mcp-Method', `Mcp-Name header ${quoted(name as string)} without Mcp-Method`, true)
  if (!isPlainAscii(method)) return mismatch('Mcp-Method', `Mcp-Method header ${quoted(method)} is not plain visible ASCII`)
  if (method !== call.method) {
    return mismatch('Mcp-Method', `Mcp-Method header ${quoted(method)} does not match the body's ${describeMethod(call)}`)
  }
  if (name === undefined) {
    return NAME_REQUIRED.has(method) ? mismatch('Mcp-Name', `Mcp-Name header missing; ${method} requires it`, true) : null
  }
  const decoded = decodeName(name)
  if (decoded === null) {
    return mismatch('Mcp-Name', `Mcp-Name header ${quoted(name)} is neither plain visible ASCII nor valid =?base64?…?= of UTF-8`)
  }
  if (call.target === '') {
    return mismatch('Mcp-Name', `Mcp-Name header ${quoted(decoded)} on ${describeMethod(call)}, which names no target`)
  }
  if (decoded !== call.target) {
    return mismatch(
      'Mcp-Name',
      `Mcp-Name header ${quoted(decoded)} does not match the body's target ${quoted(call.target)} (${call.method})`,
    )
  }
  return null
}

function joined(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value
}

function describeMethod(call: RpcCall): string {
  return call.method === '' ? 'response (no method)' : `method ${quoted(call.method)}`
}

/** `reason` for operators (the audit); the message names only the header, which the caller sent. */
function mismatch(header: string, reason: string, missing = false): Refusal {
  return {
    status: 400,
    decision: 'error',
    code: 'mcp.header_mismatch',
    rpcCode: HEADER_MISMATCH,
    message: missing ? `Header mismatch: ${header} header is missing` : `Header mismatch: ${header} header does not match the body`,
    reason: `header mismatch: ${reason}`,
  }
}

/**
 * The header sent more than once, or null. Only the names are compared, and only when one of the two
 * headers is present at all: rawHeaders is the one place that still shows a repeat.
 */
function repeatedHeader(req: IncomingMessage): string | null {
  if (rawHeaderCount(req.rawHeaders, 'mcp-method') > 1) return 'Mcp-Method'
  return rawHeaderCount(req.rawHeaders, 'mcp-name') > 1 ? 'Mcp-Name' : null
}

/**
 * Printable ASCII only. Node hands header bytes over as Latin-1, so `é` sent raw would match a body's
 * `é` here while a proxy decoding UTF-8 reads something else; the revision requires such values in
 * base64 (Mcp-Name) and has no encoding for a method. Node already strips surrounding whitespace.
 */
function isPlainAscii(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x20 || c > 0x7e) return false
  }
  return true
}

/**
 * The Mcp-Name value a server compares with the body, or null when it is malformed. Base64 is accepted
 * only in its canonical form (standard alphabet, padded, zero pad bits) and must hold valid UTF-8: a
 * lenient decoder (Node's skips foreign characters) would otherwise give two readers two names.
 */
function decodeName(value: string): string | null {
  if (!isPlainAscii(value)) return null
  if (!value.startsWith(SENTINEL_START) || !value.endsWith(SENTINEL_END)) return value
  // `=?base64?=` has both ends overlapping: the revision has clients encode such a value, so it is not plain.
  if (value.length < SENTINEL_START.length + SENTINEL_END.length) return null
  const encoded = value.slice(SENTINEL_START.length, value.length - SENTINEL_END.length)
  if (!BASE64.test(encoded)) return null
  const bytes = Buffer.from(encoded, 'base64')
  if (bytes.toString('base64') !== encoded) return null
  try {
    return UTF8.decode(bytes)
  } catch {
    return null
  }
}
