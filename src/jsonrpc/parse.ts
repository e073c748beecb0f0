import { COMPLETION_REFS, isGatedMethod } from '../mcp/methods'
import { type JsonRpcId, type RpcCall, hasControlCharacters } from '../pipeline/exchange'
import { INVALID_REQUEST, PARSE_ERROR } from '../pipeline/stage'
import { quoted, resourceTemplateProblem, resourceUriProblem } from '../mcp/resource-uri'
import { MAX_MEMBERS, type Member, type ScanLimits, type ScanResult, type ScannedMessage, plainText, scanJson } from '../json/scan'
import { OPEN_ARRAY, OPEN_OBJECT, QUOTE } from '../json/json-bytes'

export type ParseResult = { ok: true; calls: RpcCall[]; batch: boolean } | { ok: false; code: number; id: JsonRpcId; reason: string }

/**
 * Parses a POST body as one JSON-RPC 2.0 message or a batch and classifies each message. Only the
 * fields the gateway needs are read; the original bytes are what gets forwarded.
 */
export function parseMessages(body: Buffer, limits: ScanLimits): ParseResult {
  return classifyScan(body, scanJson(body, limits))
}

/** Classifies what the scanner read (json/scan.ts) of `body`. */
export function classifyScan(body: Buffer, scan: ScanResult): ParseResult {
  if (!scan.ok)
    return {
      ok: false,
      code: scan.malformed ? PARSE_ERROR : INVALID_REQUEST,
      id: null,
      reason: scan.malformed ? `malformed JSON: ${scan.reason}` : scan.reason,
    }
  const messages = scan.messages
  if (scan.batch) {
    if (messages.length === 0) return { ok: false, code: INVALID_REQUEST, id: null, reason: 'empty batch' }
    const calls: RpcCall[] = []
    for (let i = 0; i < messages.length; i++) {
      const call = classify(body, messages[i])
      if (typeof call === 'string') return { ok: false, code: INVALID_REQUEST, id: null, reason: `batch element ${i}: ${call}` }
      calls.push(call)
    }
    return { ok: true, calls, batch: true }
  }
  const call = classify(body, messages[0])
  if (typeof call === 'string') return { ok: false, code: INVALID_REQUEST, id: readableId(body, messages[0]), reason: call }
  return { ok: true, calls: [call], batch: false }
}

/**
 * The members each level defines (JSON-RPC 2.0 §4, §5; MCP's params of gated calls, with the `task`
 * of a task-augmented tools/call (MCP 2025-11-25, Tasks), and of completion/complete's ref). A key
 * spelt like one of these in another case (`Method`, `paramſ`) is read as that member by
 * case-insensitive decoders (Go's encoding/json folds case, ſ to s and K to k), so it is refused even
 * when the real member is absent.
 */
const ENVELOPE = new Set(['jsonrpc', 'id', 'method', 'params', 'result', 'error'])
const PARAMS = new Set(['name', 'arguments', 'uri', 'ref', 'argument', 'context', 'cursor', 'task', '_meta'])
const REF = new Set(['type', 'name', 'uri'])

/**
 * Unicode case folding as decoders that fold do it: upper then lower case maps ſ (U+017F) to s and
 * the Kelvin sign to k, as Go's folding does. Plain ASCII, the usual case, takes the cheap path.
 */
function fold(key: string): string {
  let upper = false
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i)
    // Any non-ASCII character anywhere takes the full path: `Paramſ` folds its ſ too.
    if (c >= 0x80) return key.toUpperCase().toLowerCase()
    if (c >= 0x41 && c <= 0x5a) upper = true
  }
  return upper ? key.toLowerCase() : key // lower-case ASCII, nearly every key: already folded
}

/**
 * Why the keys of one object are ambiguous, or null. Decoders disagree on duplicates (JSON.parse,
 * Python and Go keep the last, others the first or refuse) and on case (Go matches struct fields
 * case-insensitively), so an object whose keys could be read two ways is refused, never guessed at.
 */
function ambiguousKeys(members: readonly Member[], known: ReadonlySet<string>, where: string): string | null {
  const n = members.length
  // A handful of keys (every envelope, nearly every params) is compared pairwise: no Map to build.
  const folded: string[] = new Array<string>(n)
  const seen = n > 8 ? new Map<string, number>() : null
  for (let i = 0; i < n; i++) {
    const key = members[i].key
    const f = fold(key)
    folded[i] = f
    let earlier = -1
    if (seen !== null) {
      earlier = seen.get(f) ?? -1
      seen.set(f, i)
    } else {
      for (let j = 0; j < i; j++) if (folded[j] === f) earlier = j
    }
    if (earlier >= 0) {
      const first = members[earlier].key
      return first === key
        ? `duplicate key ${quoted(key)} in ${where}`
        : `keys ${quoted(first)} and ${quoted(key)} in ${where} are equal under case folding`
    }
    if (f !== key && known.has(f)) return `key ${quoted(key)} in ${where} is a case variant of ${quoted(f)}`
  }
  return null
}

function member(members: readonly Member[] | null, key: string): Member | undefined {
  if (members === null) return undefined
  for (let i = 0; i < members.length; i++) if (members[i].key === key) return members[i]
  return undefined
}

/** The text of a string member, or undefined when it is absent or not a string. */
function text(body: Buffer, m: Member | undefined): string | undefined {
  if (m === undefined || m.kind !== QUOTE) return undefined
  return m.plain ? plainText(body, m.start + 1, m.end - 1) : (JSON.parse(body.toString('utf8', m.start, m.end)) as string)
}

/**
 * An id as every decoder reads it: a string, null, or an integer JSON.parse holds exactly, written
 * plainly. MCP ids are strings or integers; `1.0`, `1e2` or 2^53 + 1 would come back from one server
 * as another number than the one the gateway echoes in its own answers.
 */
const PLAIN_INTEGER = /^-?(?:0|[1-9][0-9]{0,15})$/

function readId(body: Buffer, m: Member): JsonRpcId | string {
  if (m.kind === QUOTE) return text(body, m) as string
  const raw = body.toString('latin1', m.start, m.end)
  if (raw === 'null') return null
  if (PLAIN_INTEGER.test(raw) && raw !== '-0' && Number.isSafeInteger(Number(raw))) return Number(raw)
  return 'id must be a string, an integer or null'
}

/** Returns the classified message, or a string saying why it is not valid JSON-RPC. */
function classify(body: Buffer, message: ScannedMessage): RpcCall | string {
  if (message.kind !== OPEN_OBJECT) return 'message is not a JSON object'
  if (message.overflow === 'the message') return `message has more than ${MAX_MEMBERS} members`
  const members = message.members
  const envelopeProblem = ambiguousKeys(members, ENVELOPE, 'the message')
  if (envelopeProblem !== null) return envelopeProblem
  if (text(body, member(members, 'jsonrpc')) !== '2.0') return 'jsonrpc must be "2.0"'
  const idMember = member(members, 'id')
  let id: JsonRpcId | undefined
  if (idMember !== undefined) {
    const read = readId(body, idMember)
    if (typeof read === 'string' && idMember.kind !== QUOTE) return read
    id = read
  }
  const methodMember = member(members, 'method')
  if (methodMember === undefined) {
    // A response from the client to a server-initiated request (sampling, elicitation, roots).
    if (idMember === undefined || (member(members, 'result') === undefined && member(members, 'error') === undefined)) {
      return 'message has neither a method nor a result or error'
    }
    return ungatedCall(id, '')
  }
  const method = text(body, methodMember)
  if (method === undefined || method === '') return 'method must be a non-empty string'
  if (hasControlCharacters(method)) return 'method contains control characters'
  const paramsMember = member(members, 'params')
  if (paramsMember !== undefined && paramsMember.kind !== OPEN_OBJECT && paramsMember.kind !== OPEN_ARRAY)
    return 'params must be an object or an array'
  if (method === 'completion/complete') return completionCall(body, message, id)
  if (!isGatedMethod(method)) return ungatedCall(id, method)
  const params = message.params
  if (message.overflow === 'params') return `params has more than ${MAX_MEMBERS} members`
  if (params !== null) {
    const problem = ambiguousKeys(params, PARAMS, 'params')
    if (problem !== null) return problem
  }
  if (method === 'tools/call') {
    const name = text(body, member(params, 'name'))
    if (name === undefined || name === '') return 'tools/call needs params.name as a non-empty string'
    return gatedCall(id, method, method, name, member(params, 'arguments'))
  }
  // The target is the field the MCP server acts on: a resource's uri (its name is only a label the
  // caller can set to anything, so judging it would let a policy be bypassed), a prompt's name. A
  // list names nothing: whatever uri or name its caller adds is ignored upstream, so it is here too.
  if (method.endsWith('/list')) return gatedCall(id, method, method, '')
  const field = method.startsWith('resources/') ? 'uri' : 'name'
  const targetMember = member(params, field)
  // A target that is there but not a string is judged as nothing by the gateway and as something by
  // a lenient server (a number coerced to a name): refused, as is a missing one where the spec needs it.
  if (targetMember !== undefined && targetMember.kind !== QUOTE) return `${method} needs params.${field} as a string`
  if (targetMember === undefined && TARGET_REQUIRED.has(method)) return `${method} needs params.${field} as a string`
  const target = text(body, targetMember) ?? ''
  const call = gatedCall(id, method, method, target)
  return typeof call === 'string' || field !== 'uri' || targetMember === undefined ? call : (resourceUriProblem(target) ?? call)
}

/** Gated methods whose target the MCP schema requires (resources/* take `uri`, prompts/get `name`). */
const TARGET_REQUIRED = new Set(['resources/read', 'resources/subscribe', 'resources/unsubscribe', 'prompts/get'])

/**
 * completion/complete names a prompt or a resource in `params.ref` and is judged as the call it
 * completes (mcp/methods.ts COMPLETION_REFS), by the same target: the prompt's name, or the resource's
 * URI or URI template (a server completes the arguments of a template, and the SDK servers look the
 * template up by its exact text). Its keys and its URI follow the rules of that call, so the policy
 * sees what the server resolves. A completion that names nothing the gateway can judge (no ref, a ref
 * type MCP does not define) is refused rather than passed on unjudged.
 */
function completionCall(body: Buffer, message: ScannedMessage, id: JsonRpcId | undefined): RpcCall | string {
  if (message.overflow !== null) return `${message.overflow} has more than ${MAX_MEMBERS} members`
  if (message.params !== null) {
    const problem = ambiguousKeys(message.params, PARAMS, 'params')
    if (problem !== null) return problem
  }
  const ref = message.ref
  if (ref === null) return 'completion/complete needs params.ref as an object'
  const refProblem = ambiguousKeys(ref, REF, 'params.ref')
  if (refProblem !== null) return refProblem
  const type = text(body, member(ref, 'type'))
  const kind = type === undefined ? undefined : COMPLETION_REFS.get(type)
  if (kind === undefined) return 'completion/complete needs params.ref.type "ref/prompt" or "ref/resource"'
  const target = text(body, member(ref, kind.field))
  if (target === undefined) return `completion/complete needs params.ref.${kind.field} as a string for ${type}`
  const call = gatedCall(id, 'completion/complete', kind.judgedAs, target)
  return typeof call === 'string' || kind.field !== 'uri' ? call : (resourceTemplateProblem(target) ?? call)
}

/** A call no stage judges by its target (`method` '' for a response from the client). */
function ungatedCall(id: JsonRpcId | undefined, method: string): RpcCall {
  return {
    id,
    method,
    target: '',
    gated: false,
    policyMethod: '',
    reason: '',
    reasonCode: null,
    noteKinds: 0,
    argumentsStart: -1,
    argumentsEnd: -1,
  }
}

function gatedCall(id: JsonRpcId | undefined, method: string, policyMethod: string, target: string, args?: Member): RpcCall | string {
  if (hasControlCharacters(target)) return `${method} target contains control characters`
  return {
    id,
    method,
    target,
    gated: true,
    policyMethod,
    reason: '',
    reasonCode: null,
    noteKinds: 0,
    argumentsStart: args?.start ?? -1,
    argumentsEnd: args?.end ?? -1,
  }
}

/** The id to echo when a single message was refused, if it could be read. */
function readableId(body: Buffer, message: ScannedMessage | undefined): JsonRpcId {
  // An id among ambiguous keys (two of them, say) is not echoed: which one would be a guess.
  if (message === undefined || message.kind !== OPEN_OBJECT || ambiguousKeys(message.members, ENVELOPE, '') !== null) return null
  const m = member(message.members, 'id')
  if (m === undefined) return null
  const id = readId(body, m)
  return typeof id === 'string' && m.kind !== QUOTE ? null : id
}
