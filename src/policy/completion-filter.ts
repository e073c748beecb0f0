import { resourceUriProblem } from '../mcp/resource-uri'
import { idKey } from '../pipeline/id-key'
import { type Encoder, UriTemplate, rawEncode, rfc6570Encode, sdkEncode } from './uri-template'

/**
 * Completion answers that name what the caller may not read (docs/policy.md, "Completions").
 *
 * A `ref/resource` completion (MCP 2025-11-25, Completion) suggests values for one variable of a URI
 * template; the policy allowed the completion by the template's text, but a value can name a resource
 * the caller may not read (`example://notes/{id}` completing `secret` under a rule that denies
 * `example://notes/secret`). So each value is judged as the `resources/read` of the URI a client
 * would build with it: the template expanded with the completed argument set to the value and the
 * other variables from `params.context.arguments`. A variable nobody gave is a hole (any text): the
 * value is then kept only if every URI of that family would be allowed (CompiledPolicy.allowsEvery).
 *
 * Clients expand templates in more than one way (RFC 6570's encoding, the official SDK's
 * encodeURIComponent, or none at all), so a value is kept only if the URI is allowed under each, and
 * the RFC 6570 one is a URI the gateway would let the caller read (normal form, mcp/resource-uri.ts).
 */

/** The request a completion answer answers, as far as the filter needs it. */
export interface CompletionRequest {
  readonly id: unknown
  /** Null for a `ref/prompt` completion, whose values name no resource. */
  readonly template: UriTemplate | null
  /** The completed argument, null when the request does not say (then nothing can be judged). */
  readonly argument: string | null
  readonly context: ReadonlyMap<string, string>
}

export interface CompletionCount {
  readonly id: unknown
  readonly hidden: number
  readonly total: number
}

const ENCODERS: readonly Encoder[] = [rfc6570Encode, sdkEncode, rawEncode]

/**
 * MCP (Completion, "Implementation Considerations"; the schema's CompleteResult) caps an answer at
 * 100 values. Values past it are hidden unjudged: judging costs a scan of the rules per value when the
 * template has a hole, so an answer of a million values would hold the event loop for seconds.
 */
const MAX_VALUES = 100

/**
 * Cheap test before any parse: a message without the key `completion` cannot hold a completion
 * answer. The key may be written with escaped letters (`"c\u006fmpletion"`), so an escape of a
 * lower-case ASCII letter goes on to the full reading; the escapes of non-ASCII text that some
 * encoders write everywhere (Python's json.dumps) do not.
 */
export function mayHoldCompletion(message: string): boolean {
  return message.includes('"completion"') || ESCAPED_LETTER.test(message)
}

const ESCAPED_LETTER = /\\u00[67]/i

/** The completion/complete requests of a request body (a JSON-RPC message or batch), as sent. */
export function completionRequests(body: Buffer | null): CompletionRequest[] {
  if (body === null) return []
  let parsed: unknown
  try {
    parsed = JSON.parse(body.toString('utf8'))
  } catch {
    return []
  }
  const out: CompletionRequest[] = []
  const messages: unknown[] = Array.isArray(parsed) ? parsed : [parsed]
  for (const message of messages) {
    if (!isObject(message) || message.method !== 'completion/complete') continue
    const params = isObject(message.params) ? message.params : {}
    const ref = isObject(params.ref) ? params.ref : {}
    const argument = isObject(params.argument) && typeof params.argument.name === 'string' ? params.argument.name : null
    const context = new Map<string, string>()
    const given = isObject(params.context) && isObject(params.context.arguments) ? params.context.arguments : {}
    for (const name of Object.keys(given)) if (typeof given[name] === 'string') context.set(name, given[name])
    const template = ref.type === 'ref/resource' && typeof ref.uri === 'string' ? new UriTemplate(ref.uri) : null
    out.push({ id: message.id, template, argument, context })
  }
  return out
}

/** The completion requests of `requests` an answer with this id may answer (its id read as a server would, pipeline/id-key.ts). */
export function requestsWithId(requests: readonly CompletionRequest[], id: unknown): CompletionRequest[] {
  const key = keyOf(id)
  return requests.filter((r) => keyOf(r.id) === key)
}

/**
 * A request whose answers can never be judged (completion values all hidden): what a legacy session
 * remembers for an id once too many requests share it (list-filter.ts).
 */
export const UNJUDGEABLE: CompletionRequest = { id: null, template: new UriTemplate(''), argument: null, context: new Map() }

/**
 * Filters the completion answers in one JSON-RPC message or batch. `requestsFor` gives the completion
 * requests an answer with this id may answer (none: an answer on a stream, or misrouted to another
 * request's stream, whose request is unknown: every value is hidden, as none can be judged). `allowed` says
 * whether `resources/read` is allowed for every URI of a family (literal parts around holes).
 * Returns the same string when nothing is hidden; otherwise the message re-encoded, `values` cut
 * and `total` lowered by as many (never below the values kept); `hasMore` stays as the server said.
 */
export function filterCompletionMessage(
  text: string,
  requestsFor: (id: unknown) => readonly CompletionRequest[],
  allowed: (parts: readonly string[]) => boolean,
): { text: string; counts: CompletionCount[] } {
  const bom = text.charCodeAt(0) === 0xfeff ? 1 : 0
  let parsed: unknown
  try {
    parsed = JSON.parse(bom === 0 ? text : text.slice(1))
  } catch {
    return { text, counts: [] }
  }
  const counts: CompletionCount[] = []
  const messages: unknown[] = Array.isArray(parsed) ? parsed : [parsed]
  for (const message of messages) {
    if (!isObject(message) || !isObject(message.result)) continue
    const completion = message.result.completion
    if (!isObject(completion) || !Array.isArray(completion.values)) continue
    const values = completion.values as unknown[]
    const candidates = requestsFor(message.id)
    const kept = values.filter((value, i) => i < MAX_VALUES && candidates.length > 0 && candidates.every((r) => keeps(r, value, allowed)))
    if (kept.length === values.length) continue
    completion.values = kept
    if (typeof completion.total === 'number') completion.total = Math.max(kept.length, completion.total - (values.length - kept.length))
    counts.push({ id: message.id, hidden: values.length - kept.length, total: values.length })
  }
  if (counts.length === 0) return { text, counts }
  return { text: (bom === 0 ? '' : '\ufeff') + JSON.stringify(parsed), counts }
}

/** Whether a value may be shown as an answer to this request. */
function keeps(request: CompletionRequest, value: unknown, allowed: (parts: readonly string[]) => boolean): boolean {
  if (request.template === null) return true
  if (typeof value !== 'string' || request.argument === null) return false
  const values = new Map(request.context)
  values.set(request.argument, value)
  for (let i = 0; i < ENCODERS.length; i++) {
    const parts = request.template.expand(values, ENCODERS[i])
    // The URI a client builds by the RFC must be one the gateway would let it read at all.
    if (i === 0 && parts.length === 1 && resourceUriProblem(parts[0]) !== null) return false
    if (!allowed(parts)) return false
  }
  return true
}

/** Ids matched as a server would route the answer (pipeline/id-key.ts): an answer to `1` may come back as `"1"`. */
export function keyOf(id: unknown): string {
  return idKey(typeof id === 'string' || typeof id === 'number' ? id : null)
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}
