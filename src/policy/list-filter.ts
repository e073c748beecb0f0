import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COMMA, OPEN_ARRAY, OPEN_OBJECT, QUOTE, isJsonSpace } from '../json/json-bytes'
import { resourceTemplateProblem, resourceUriProblem } from '../mcp/resource-uri'
import { type Exchange, type JsonRpcId, type RpcCall, hasControlCharacters } from '../pipeline/exchange'
import { NOTE, addNote, hasNote } from '../pipeline/reason'
import { CONTINUE, INVALID_REQUEST, type Refusal, type Stage } from '../pipeline/stage'
import { stateKey } from '../pipeline/state'
import type { CompiledPolicy } from './compile'
import {
  type CompletionRequest,
  UNJUDGEABLE,
  completionRequests,
  filterCompletionMessage,
  keyOf,
  mayHoldCompletion,
  requestsWithId,
} from './completion-filter'
import { idKey } from '../pipeline/id-key'
import { endpointParameters } from '../mcp/legacy-endpoint'

/**
 * What each list answer holds: the result member with the entries, the field that names an entry's
 * target, and the call the policy would judge for that target. An entry is listed iff that call
 * would be allowed for the caller.
 */
interface ListKind {
  readonly key: string
  readonly field: string
  readonly judgedAs: string
  /** The list method (for the audit reason of the call that asked). */
  readonly method: string
}

const KINDS: readonly ListKind[] = [
  { key: 'tools', field: 'name', judgedAs: 'tools/call', method: 'tools/list' },
  { key: 'prompts', field: 'name', judgedAs: 'prompts/get', method: 'prompts/list' },
  { key: 'resources', field: 'uri', judgedAs: 'resources/read', method: 'resources/list' },
  // A template is judged by its text: `file:///docs/{name}` is listed when `file:///docs/*` may be read.
  { key: 'resourceTemplates', field: 'uriTemplate', judgedAs: 'resources/read', method: 'resources/templates/list' },
]

export const LIST_METHODS: readonly string[] = KINDS.map((k) => k.method)
/** The methods whose answers this stage reads: the lists, and completions (completion-filter.ts). */
const READ_METHODS: readonly string[] = [...LIST_METHODS, 'completion/complete']

/** A call whose answer is filtered: a list, or a completion whose values name resources. */
function filtered(call: RpcCall): boolean {
  return (
    call.id !== undefined &&
    (LIST_METHODS.includes(call.method) || (call.method === 'completion/complete' && call.policyMethod === 'resources/read'))
  )
}

/**
 * The policy the filter judges with: the one in force now, so a stream opened before a reload follows
 * the new rules. Null while the policy in force can deny nothing (or there is none, or filter_lists is
 * off): a filter of an older chain then lets every answer pass.
 */
export interface ListFilterState {
  current: CompiledPolicy | null
  /** `<session>\n<id key>` of every list (or ref/resource completion) call in flight in a session, with how many (see `run`). */
  readonly pending: Map<string, number>
  /**
   * How many of those calls are in flight per session (NO_SESSION for requests without one): every
   * answer in such a session is read (see `alsoReads`).
   */
  readonly sessions: Map<string, number>
  /**
   * The legacy transport answers a POST /messages?sessionId=… on the session's /sse stream, where the
   * request is not at hand: its completion requests wait here, by session and id key, until their
   * answer comes. Only sessions whose /sse stream runs through this process (learnt from its endpoint
   * event, forgotten when it ends), so the map is bounded by the streams open.
   */
  readonly legacy: Map<string, Map<string, CompletionRequest[]>>
}

export function listFilterState(): ListFilterState {
  return { current: null, pending: new Map(), sessions: new Map(), legacy: new Map() }
}

/** True when `run` counted the request's list calls in `pending` and `sessions` (`finish` gives them back). */
const REGISTERED = stateKey<boolean>('list-filter.registered', false)
/** The legacy session of an /sse stream, from its endpoint event; null for every other request. */
const LEGACY_SESSION = stateKey<string | null>('list-filter.legacy-session', null)

/** Completions awaiting their answer per legacy session, and requests per id: past them, answers are hidden. */
const LEGACY_IDS = 32
const LEGACY_PER_ID = 8

const REUSED_ID: Refusal = {
  status: 409,
  decision: 'error',
  code: 'jsonrpc.id_reused',
  rpcCode: INVALID_REQUEST,
  reason: 'request id reuses the id of a list or completion call still in flight in this session',
  message: 'Request id already in use in this session',
}

/**
 * Hides from list answers what the caller may not use (docs/policy.md, "What an agent sees"). It
 * reads the answers of the four list methods, every server-to-client stream (a GET stream, the
 * legacy /sse stream: a list answer can arrive there too, by resumption or on the legacy
 * transport) and, while a list call runs in a session, every other answer of that session. An
 * answer is recognised by its shape, never by its id: ids are the caller's to choose, and a batch
 * with two list calls under one id must not make a tools list pass as a prompts list. It also cuts
 * from `ref/resource` completion answers the values naming what the caller may not read
 * (completion-filter.ts); a `ref/resource` completion counts as a list call below.
 *
 * Removed entries are cut out of the text and every other byte stays as the upstream sent it (only a
 * message with duplicated keys is re-encoded, see cutEntries); an answer where nothing is hidden
 * keeps its original bytes.
 */
export function listFilterStage(state: ListFilterState): Stage {
  return {
    name: 'list-filter',
    answers: {
      methods: READ_METHODS,
      reads: 'messages',
      streams: true,
      /**
       * While a list call runs in a session, every other answer in that session is read too: a server
       * may route the list's answer to another request's stream by a rule the id check in `run` does
       * not foresee. Decided when the request is admitted; the GET streams are read anyway.
       */
      alsoReads(ex: Exchange): boolean {
        if (state.sessions.size === 0) return false
        const session = ex.req.headers['mcp-session-id']
        return state.sessions.has(typeof session === 'string' ? session : NO_SESSION)
      },
    },
    /**
     * A stateful server (the official SDKs) sends an answer to the stream of the latest POST that
     * carried its id, as it reads the id: the TypeScript SDK by value, the Python SDK by its text
     * (`1` and `"1"` are one id there). A call whose id any server could confuse with that of a list
     * call still running in the same session would receive that list on its own stream: refused
     * (pipeline/id-key.ts), as MCP forbids reusing an id within a session.
     */
    run(ex: Exchange) {
      const session = ex.req.headers['mcp-session-id']
      const calls = ex.calls
      if (typeof session !== 'string') {
        if (state.legacy.size > 0 && calls.some((c) => c.method === 'completion/complete')) rememberLegacy(state, ex)
        // No session, so no 409: stateless clients of different callers reuse small ids all the time.
        // But a server that files answer streams by id alone (one stateless transport for every
        // request, as the TypeScript SDK allowed before 1.26) may deliver this list to another
        // sessionless request: while it runs, every sessionless answer is read (alsoReads).
        for (let i = 0; i < calls.length; i++) {
          if (!filtered(calls[i])) continue
          state.sessions.set(NO_SESSION, (state.sessions.get(NO_SESSION) ?? 0) + 1)
          ex.set(REGISTERED, true)
        }
        return CONTINUE
      }
      if (calls.length === 0) return CONTINUE
      const pending = state.pending
      if (pending.size > 0) {
        for (let i = 0; i < calls.length; i++)
          if (calls[i].id !== undefined && pending.has(sessionIdKey(session, calls[i].id))) return REUSED_ID
      }
      for (let i = 0; i < calls.length; i++) {
        const call = calls[i]
        if (!filtered(call)) continue
        const key = sessionIdKey(session, call.id)
        pending.set(key, (pending.get(key) ?? 0) + 1)
        state.sessions.set(session, (state.sessions.get(session) ?? 0) + 1)
        ex.set(REGISTERED, true)
      }
      return CONTINUE
    },
    finish(ex: Exchange) {
      noteStreamTotals(ex)
      const legacySession = ex.get(LEGACY_SESSION)
      if (legacySession !== null) state.legacy.delete(legacySession)
      if (!ex.get(REGISTERED)) return
      ex.set(REGISTERED, false)
      const header = ex.req.headers['mcp-session-id']
      const session = typeof header === 'string' ? header : NO_SESSION
      for (const call of ex.calls) {
        if (!filtered(call)) continue
        if (session !== NO_SESSION) release(state.pending, sessionIdKey(session, call.id))
        release(state.sessions, session)
      }
    },
    onMessage(ex: Exchange, message: string): string {
      if (ex.body === null && ex.get(LEGACY_SESSION) === null) learnLegacySession(state, ex, message)
      // Requests, notifications and errors carry no list: most stream traffic stops here (a key can
      // be written with escapes, `"resul\u0074"`, so any escape goes on to the full reading).
      if (!message.includes('"result"') && !message.includes('\\u')) return message
      const policy = state.current
      if (policy === null) return message
      const principal = ex.principal
      // The policy first: an entry it hides needs no URL parse.
      const judge = (kind: ListKind, target: string): boolean =>
        policy.effectOf(policy.match(principal?.identity ?? '', principal?.tenant ?? '', kind.judgedAs, target)) === 'allow' &&
        usable(kind, target)
      const lists = filterListMessage(message, judge)
      for (const c of lists.counts) noteHidden(ex, NOTE.listFiltered, c.kind.method, c.kind.key, c)
      if (!mayHoldCompletion(lists.text)) return lists.text
      const identity = principal?.identity ?? ''
      const tenant = principal?.tenant ?? ''
      const completions = filterCompletionMessage(lists.text, requestsOf(state, ex), (parts) =>
        policy.allowsEvery(identity, tenant, 'resources/read', parts),
      )
      for (const c of completions.counts) noteHidden(ex, NOTE.completionFiltered, 'completion/complete', 'values', c)
      return completions.text
    },
  }
}

/**
 * The completion requests an answer in this exchange may answer: those of its own body, or, on a
 * legacy /sse stream, those its session's POSTs left waiting (each looked up once: its answer came).
 */
function requestsOf(state: ListFilterState, ex: Exchange): (id: unknown) => readonly CompletionRequest[] {
  const session = ex.get(LEGACY_SESSION)
  const waiting = session === null ? undefined : state.legacy.get(session)
  if (waiting !== undefined) {
    return (id) => {
      const key = keyOf(id)
      const requests = waiting.get(key) ?? []
      waiting.delete(key)
      return requests
    }
  }
  const requests = completionRequests(ex.body)
  return (id) => requestsWithId(requests, id)
}

/** A legacy /sse stream's endpoint event (data `/messages?sessionId=…`, not JSON) names its session. */
function learnLegacySession(state: ListFilterState, ex: Exchange, data: string): void {
  const session = endpointParameters(data)?.get('sessionId')
  if (!session) return
  ex.set(LEGACY_SESSION, session)
  state.legacy.set(session, new Map())
}

/**
 * A legacy POST's completion requests wait for their answer on the session's stream. Two requests
 * under one id are both judged (every one must keep a value); past LEGACY_PER_ID the id is
 * unjudgeable, and past LEGACY_IDS ids new ones are not remembered: their answers are hidden. Never
 * is a request forgotten while another under its id waits, so no answer is judged by the wrong one.
 */
function rememberLegacy(state: ListFilterState, ex: Exchange): void {
  const waiting = state.legacy.get(ex.sessionId)
  if (waiting === undefined) return
  for (const request of completionRequests(ex.body)) {
    const key = keyOf(request.id)
    const requests = waiting.get(key)
    if (requests === undefined) {
      if (waiting.size < LEGACY_IDS) waiting.set(key, [request])
    } else if (requests.length < LEGACY_PER_ID) requests.push(request)
    else if (!requests.includes(UNJUDGEABLE)) requests.push(UNJUDGEABLE)
  }
}

/**
 * Whether the gateway would take a call to this entry at all: a name with control characters, or a
 * URI (template) not in normal form, is refused with a 400 before policy (jsonrpc/parse.ts), so
 * listing it would offer the caller something it cannot use.
 */
function usable(kind: ListKind, target: string): boolean {
  if (hasControlCharacters(target)) return false
  if (kind.key === 'resources') return resourceUriProblem(target) === null
  if (kind.key === 'resourceTemplates') return resourceTemplateProblem(target) === null
  return true
}

/** How many entries of one list answer were hidden, of how many. */
export interface HiddenCount {
  readonly id: unknown
  readonly kind: ListKind
  readonly hidden: number
  readonly total: number
}

/**
 * Filters the list answers in one JSON-RPC message or batch (a JSON body, one SSE event's data).
 * Returns the same string when nothing was hidden, and the counts of every list answer seen that
 * hid something. Text that is not JSON is returned as it is: no JSON client could read a list in it.
 */
export function filterListMessage(
  text: string,
  allowed: (kind: ListKind, target: string) => boolean,
): { text: string; counts: HiddenCount[] } {
  // A byte order mark: JSON.parse refuses it, but clients that decode the body as UTF-8 drop it and
  // read the list behind it, so it is judged as they read it.
  if (text.charCodeAt(0) === 0xfeff) {
    const inner = filterListMessage(text.slice(1), allowed)
    return inner.text === text.slice(1) ? { text, counts: inner.counts } : inner
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return { text, counts: [] }
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed]
  // [message index, kind, entry indices to remove]
  const removals: Array<[number, ListKind, number[]]> = []
  const counts: HiddenCount[] = []
  for (let m = 0; m < messages.length; m++) {
    const result = resultOf(messages[m])
    if (result === null) continue
    for (const kind of KINDS) {
      const entries = result[kind.key]
      if (!Array.isArray(entries)) continue
      const remove: number[] = []
      for (let i = 0; i < entries.length; i++) {
        const entry: unknown = entries[i]
        const target = entry !== null && typeof entry === 'object' ? (entry as Record<string, unknown>)[kind.field] : undefined
        if (!allowed(kind, typeof target === 'string' ? target : '')) remove.push(i)
      }
      if (remove.length === 0) continue
      removals.push([m, kind, remove])
      counts.push({ id: (messages[m] as Record<string, unknown>).id, kind, hidden: remove.length, total: entries.length })
    }
  }
  if (removals.length === 0) return { text, counts }
  return { text: cutEntries(text, Array.isArray(parsed), removals, messages), counts }
}

function resultOf(message: unknown): Record<string, unknown> | null {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) return null
  const result = (message as Record<string, unknown>).result
  return result !== null && typeof result === 'object' && !Array.isArray(result) ? (result as Record<string, unknown>) : null
}

/**
 * Cuts the removed entries out of the text. The entries were judged on JSON.parse's reading, where
 * the last of duplicate keys wins; a client that keeps the first would read another array, so a
 * message with a duplicated `result` or list key is re-encoded whole (from the parsed value, entries
 * removed) instead: then every reader sees the one array that was judged.
 */
function cutEntries(text: string, batch: boolean, removals: Array<[number, ListKind, number[]]>, messages: unknown[]): string {
  const scan = new Spans(text)
  const first = scan.valueStart(0)
  const messageSpans = batch ? scan.elements(first) : [[first, scan.valueEnd(first)]]
  const byMessage = new Map<number, Array<[ListKind, number[]]>>()
  for (const [m, kind, remove] of removals) {
    const list = byMessage.get(m)
    if (list === undefined) byMessage.set(m, [[kind, remove]])
    else list.push([kind, remove])
  }
  // Cuts never overlap: one per list array, or one per re-encoded message.
  const cuts: Array<[number, number, string]> = []
  for (const [m, kinds] of byMessage) {
    const [start, end] = messageSpans[m]
    const results = scan.members(start, 'result')
    const arrays = results.length === 1 ? kinds.map(([kind]) => scan.members(results[0][0], kind.key)) : []
    if (results.length !== 1 || arrays.some((spans) => spans.length !== 1)) {
      const result = (messages[m] as Record<string, unknown>).result as Record<string, unknown>
      for (const [kind, remove] of kinds) {
        const drop = new Set(remove)
        result[kind.key] = (result[kind.key] as unknown[]).filter((_, i) => !drop.has(i))
      }
      cuts.push([start, end, JSON.stringify(messages[m])])
      continue
    }
    for (let k = 0; k < kinds.length; k++) {
      const [open, close] = arrays[k][0]
      const drop = new Set(kinds[k][1])
      const kept = scan.elements(open).filter((_, i) => !drop.has(i))
      // Entries kept are copied as written; the separators between them become a plain comma.
      cuts.push([open, close, `[${kept.map(([s, e]) => text.slice(s, e)).join(',')}]`])
    }
  }
  // Built once from the pieces between the cuts: a batch of large lists must not copy the whole text per cut.
  cuts.sort((a, b) => a[0] - b[0])
  const parts: string[] = []
  let from = 0
  for (const [s, e, replacement] of cuts) {
    parts.push(text.slice(from, s), replacement)
    from = e
  }
  parts.push(text.slice(from))
  return parts.join('')
}

/**
 * Notes on the audit entry how many entries of one answer were hidden (docs/policy.md): `kind` names
 * the filter, `what` the entries (`tools`, `values`).
 */
function noteHidden(
  ex: Exchange,
  kind: FilterNote,
  method: string,
  what: string,
  count: { id: unknown; hidden: number; total: number },
): void {
  // The first call this answer can be for whose own answer is not yet counted (a batch may hold two
  // calls with one id): asked by the note's kind, never by searching the text.
  const call = ex.calls.find((c) => c.id === count.id && c.method === method && !hasNote(c, kind))
  const note = NOTE_TEXT[kind]
  if (call !== undefined) {
    addNote(call, kind, `${note}${count.hidden} of ${count.total} ${what} hidden`)
    return
  }
  // A stream (or an answer no call of this request asked for): one running total per kind, noted
  // once when the request finishes, so a stream that carries a thousand lists has one short reason.
  let totals = ex.get(STREAM_TOTALS)
  if (totals === null) ex.set(STREAM_TOTALS, (totals = new Map<string, StreamTotal>()))
  const key = `${note}${what}`
  const sum = totals.get(key) ?? { kind, what, hidden: 0, total: 0, answers: 0 }
  totals.set(key, { kind, what, hidden: sum.hidden + count.hidden, total: sum.total + count.total, answers: sum.answers + 1 })
}

/** The finish phase: what a stream's answers hid, in its reason (`… 8 of 10 tools hidden in 2 answers`). */
function noteStreamTotals(ex: Exchange): void {
  const totals = ex.get(STREAM_TOTALS)
  if (totals === null) return
  ex.set(STREAM_TOTALS, null)
  for (const kind of [NOTE.listFiltered, NOTE.completionFiltered] as const) {
    const notes = [...totals.values()]
      .filter((t) => t.kind === kind)
      .map((t) => `${t.hidden} of ${t.total} ${t.what} hidden in ${t.answers} answer${t.answers === 1 ? '' : 's'}`)
    if (notes.length === 0) continue
    addNote(ex, kind, `${NOTE_TEXT[kind]}${notes.join(', ')}`)
  }
}

/** The `sessions` key of requests without Mcp-Session-Id: no header value holds a line feed. */
const NO_SESSION = '\n'

function sessionIdKey(session: string, id: JsonRpcId | undefined): string {
  return `${session}\n${idKey(id ?? null)}`
}

function release(counts: Map<string, number>, key: string): void {
  const left = (counts.get(key) ?? 1) - 1
  if (left <= 0) counts.delete(key)
  else counts.set(key, left)
}

type FilterNote = typeof NOTE.listFiltered | typeof NOTE.completionFiltered
/** How each kind of note this filter makes begins in the audit reason. */
const NOTE_TEXT: Readonly<Record<FilterNote, string>> = {
  [NOTE.listFiltered]: 'list filtered by policy: ',
  [NOTE.completionFiltered]: 'completion filtered by policy: ',
}
interface StreamTotal {
  readonly kind: FilterNote
  readonly what: string
  readonly hidden: number
  readonly total: number
  readonly answers: number
}
/** A stream's running totals of what its answers hid, by note and kind (noted in its reason at finish). */
const STREAM_TOTALS = stateKey<Map<string, StreamTotal> | null>('list-filter.stream-totals', null)

/**
 * Finds where values lie in a JSON text already known to be valid (JSON.parse accepted it): value
 * starts and ends, the members of an object with a given key, the elements of an array.
 */
class Spans {
  constructor(private readonly text: string) {}

  valueStart(i: number): number {
    const t = this.text
    while (i < t.length && isJsonSpace(t.charCodeAt(i))) i++
    return i
  }

  /** The index just after the value starting at `i`. */
  valueEnd(i: number): number {
    const t = this.text
    const c = t.charCodeAt(i)
    if (c === QUOTE) return this.stringEnd(i)
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      let depth = 0
      for (let j = i; j < t.length; j++) {
        const d = t.charCodeAt(j)
        if (d === QUOTE) j = this.stringEnd(j) - 1
        else if (d === OPEN_OBJECT || d === OPEN_ARRAY) depth++
        else if (d === CLOSE_OBJECT || d === CLOSE_ARRAY) {
          if (--depth === 0) return j + 1
        }
      }
      return t.length
    }
    // A number, true, false or null: up to the next delimiter.
    let j = i
    while (j < t.length && !DELIMITERS.includes(t[j])) j++
    return j
  }

  /** The index just after the string starting at `i`: the next quote not escaped by an odd run of backslashes. */
  private stringEnd(i: number): number {
    const t = this.text
    let from = i + 1
    for (;;) {
      const q = t.indexOf('"', from)
      if (q < 0) return t.length
      let b = q - 1
      while (b > i && t.charCodeAt(b) === BACKSLASH) b--
      if ((q - 1 - b) % 2 === 0) return q + 1
      from = q + 1
    }
  }

  /** [start, end) of each value of the object at `i` whose key (decoded) is `key`, in order. */
  members(i: number, key: string): Array<[number, number]> {
    const out: Array<[number, number]> = []
    const t = this.text
    let j = this.valueStart(i + 1)
    while (t.charCodeAt(j) !== CLOSE_OBJECT) {
      const keyEnd = this.stringEnd(j)
      const name = JSON.parse(t.slice(j, keyEnd)) as string
      const start = this.valueStart(this.valueStart(keyEnd) + 1) // past the colon
      const end = this.valueEnd(start)
      if (name === key) out.push([start, end])
      j = this.valueStart(end)
      if (t.charCodeAt(j) === COMMA) j = this.valueStart(j + 1)
    }
    return out
  }

  /** [start, end) of each element of the array at `i`. */
  elements(i: number): Array<[number, number]> {
    const out: Array<[number, number]> = []
    const t = this.text
    let j = this.valueStart(i + 1)
    while (t.charCodeAt(j) !== CLOSE_ARRAY) {
      const end = this.valueEnd(j)
      out.push([j, end])
      j = this.valueStart(end)
      if (t.charCodeAt(j) === COMMA) j = this.valueStart(j + 1)
    }
    return out
  }
}

const DELIMITERS = ',]} \t\r\n'
