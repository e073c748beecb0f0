import type { Decision, Exchange, RpcCall } from '../pipeline/exchange'
import { type ReasonCode, joinReasons } from '../pipeline/reason'

/**
 * The JSONL text of entries: one JSON object per line, each line ending in a newline, byte for byte
 * what `JSON.stringify` writes for an entry built by `auditEntries` (keys in that order), except that
 * U+0085 (NEL), U+2028 and U+2029, the line breaks JSON.stringify leaves raw (it escapes every C0
 * control), are escaped: Python's str.splitlines(), JavaScript source and some log shippers treat them
 * as line breaks, so a caller's tool name or session id holding one would split its audit line in two
 * for those readers. Inside JSON they can only sit in a string, where `\u0085` reads back as the same
 * character.
 *
 * Built by hand rather than by JSON.stringify: the gateway writes one line per request, and the keys,
 * the decision and most values (printable ASCII) need no escaping; a value that does goes through
 * JSON.stringify (jsonInner).
 */
export function toJsonLines(entries: readonly AuditEntry[]): string {
  let text = ''
  for (let i = 0; i < entries.length; i++) text += jsonLine(entries[i])
  return text
}

function jsonLine(e: AuditEntry): string {
  // An entry not built by auditEntries (a spilled line read back, a test's) may lack a field or hold
  // another type: JSON.stringify writes it as it is (and omits what is undefined).
  if (!wellFormed(e)) return escapeLineBreaks(JSON.stringify(e)) + '\n'
  // The quotes sit in the key literals, so a line is about half as many joined pieces.
  let line =
    '{"timestamp":"' +
    jsonInner(e.timestamp) +
    '","request_id":"' +
    jsonInner(e.request_id) +
    '","identity":"' +
    jsonInner(e.identity) +
    '","tenant":"' +
    jsonInner(e.tenant) +
    '","method":"' +
    jsonInner(e.method) +
    '","tool":"' +
    jsonInner(e.tool) +
    '","decision":"' +
    jsonInner(e.decision) +
    '","status":' +
    jsonNumber(e.status) +
    ',"latency_ms":' +
    jsonMilliseconds(e.latency_ms)
  if (e.reason_code !== undefined) line += ',"reason_code":"' + jsonInner(e.reason_code) + '"'
  if (e.reason !== undefined) line += ',"reason":"' + jsonInner(e.reason) + '"'
  if (e.session_id !== undefined) line += ',"session_id":"' + jsonInner(e.session_id) + '"'
  if (e.server !== undefined) line += ',"server":"' + jsonInner(e.server) + '"'
  return line + '}\n'
}

function wellFormed(e: AuditEntry): boolean {
  return (
    typeof e.timestamp === 'string' &&
    typeof e.request_id === 'string' &&
    typeof e.identity === 'string' &&
    typeof e.tenant === 'string' &&
    typeof e.method === 'string' &&
    typeof e.tool === 'string' &&
    typeof e.decision === 'string' &&
    typeof e.status === 'number' &&
    typeof e.latency_ms === 'number' &&
    (e.reason_code === undefined || typeof e.reason_code === 'string') &&
    (e.reason === undefined || typeof e.reason === 'string') &&
    (e.session_id === undefined || typeof e.session_id === 'string') &&
    (e.server === undefined || typeof e.server === 'string')
  )
}

/** A JSON string literal: printable ASCII without `"` and `\` as it is, anything else as JSON.stringify (plus line breaks) writes it. */
export function jsonString(value: string): string {
  return '"' + jsonInner(value) + '"'
}

/** A JSON string literal's text between its quotes: the value itself when it needs no escaping. */
function jsonInner(value: string): string {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i)
    if (c < 0x20 || c === 0x22 || c === 0x5c || c >= 0x7f) return escapedString(value).slice(1, -1)
  }
  return value
}

function escapedString(value: string): string {
  return escapeLineBreaks(JSON.stringify(value))
}

function escapeLineBreaks(json: string): string {
  return LINE_BREAKS.test(json) ? json.replace(LINE_BREAKS_ALL, escapeLineBreak) : json
}

/**
 * A latency with at most three decimals (auditEntries rounds to the microsecond), written as
 * JSON.stringify writes it, without its shortest-decimal search (~150 ns a number): the whole
 * milliseconds, then the microseconds without trailing zeros. Anything else (more decimals, negative,
 * huge) goes to jsonNumber.
 */
function jsonMilliseconds(value: number): string {
  const micros = Math.round(value * 1000)
  if (micros / 1000 !== value || micros <= 0 || micros > Number.MAX_SAFE_INTEGER) return jsonNumber(value)
  const whole = Math.floor(micros / 1000)
  let fraction = micros - whole * 1000
  if (fraction === 0) return String(whole)
  const lead = fraction < 10 ? '.00' : fraction < 100 ? '.0' : '.'
  while (fraction % 10 === 0) fraction /= 10
  return whole + lead + fraction
}

/** As JSON.stringify writes a number: NaN and the infinities as null. */
function jsonNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null'
}

const LINE_BREAKS = /[\u0085\u2028\u2029]/
const LINE_BREAKS_ALL = /[\u0085\u2028\u2029]/g
function escapeLineBreak(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
}

/**
 * `new Date(ms).toISOString()` for the audit timestamp, with everything up to the second cached: the
 * gateway asks once per request, and a Date plus its formatting cost more than the rest of the line.
 */
export function isoTimestamp(ms: number): string {
  const second = Math.floor(ms / 1000)
  const milli = ms - second * 1000
  if (!Number.isInteger(milli)) return new Date(ms).toISOString()
  if (second !== cachedSecond) {
    // Whatever the year's form (+010000-…), the text ends in `.mmmZ`.
    cachedPrefix = new Date(second * 1000).toISOString().slice(0, -4)
    cachedSecond = second
  }
  return cachedPrefix + (milli < 10 ? '00' : milli < 100 ? '0' : '') + milli + 'Z'
}

let cachedSecond = Number.NaN
let cachedPrefix = ''

/** One line of the audit trail. Key order is part of the format: build it with `auditEntries`. */
export interface AuditEntry {
  readonly timestamp: string
  readonly request_id: string
  readonly identity: string
  readonly tenant: string
  readonly method: string
  /** The call's target (tool name, prompt name or resource URI); named `tool` in the format since its first version. */
  readonly tool: string
  readonly decision: Decision
  readonly status: number
  readonly latency_ms: number
  /**
   * Why the entry has its decision, as a stable code (pipeline/reason.ts, docs/gateway.md "Reason
   * codes: a ReasonCode); absent for an ordinary allow or passthrough. A string, not the union: a
   * trail read back may hold a code a later release added.
   */
  readonly reason_code?: string
  readonly reason?: string
  readonly session_id?: string
  /**
   * The server (config `servers:`) the request was routed to; absent with `upstream:` alone and for a
   * path that names no server. Last: a line of a single-upstream gateway stays as it always was.
   */
  readonly server?: string
}

/**
 * How many entries `auditEntries` writes for this request if it is forwarded, the most it can write:
 * 1 for a single message or a request without a JSON-RPC body; for a batch, one per gated element
 * plus one if any element is not gated. A refused request writes 1. The audit reservation stage
 * reserves this many queue slots before anything with side effects runs.
 */
export function entryCount(ex: Exchange): number {
  if (!ex.batch) return 1
  const calls = ex.calls
  let gated = 0
  for (let i = 0; i < calls.length; i++) if (calls[i].gated) gated++
  return Math.max(1, gated + (gated < calls.length ? 1 : 0))
}

/**
 * What the request as a whole came to: the decision a stage or a failure set, else `allow` when it
 * carried a gated call and `passthrough` when it did not. A single message's entry says the same.
 */
export function requestDecision(ex: Exchange): Decision {
  if (ex.decision !== null) return ex.decision
  const calls = ex.calls
  for (let i = 0; i < calls.length; i++) if (calls[i].gated) return 'allow'
  return 'passthrough'
}

/**
 * The entries for one finished request: one for a single message, a request without a JSON-RPC
 * body, or any request that was not forwarded (an entry per element would let a refused
 * 20 000-element batch write 20 000 entries and flush real calls out of a full queue); for a forwarded batch, one per gated
 * element plus one for the rest (if any). Forwarded batch entries get `<request_id>/<element index>`
 * and `<request_id>/rest` so every request_id stays unique.
 */
export function auditEntries(ex: Exchange, nowMonoMs: number): AuditEntry[] {
  const timestamp = isoTimestamp(ex.startedAtMs)
  const latency = Math.round((nowMonoMs - ex.startedMonoMs) * 1000) / 1000
  const identity = ex.principal?.identity ?? ''
  const tenant = ex.principal?.tenant ?? ''
  const sessionId = ex.sessionId
  const server = ex.server
  const calls = ex.calls
  if (!ex.batch) {
    const call = ex.single
    const method = call === null ? (ex.req.method ?? '') : call.method || 'response'
    const decision = requestDecision(ex)
    return [
      entry(
        timestamp,
        ex.requestId,
        identity,
        tenant,
        method,
        call?.target ?? '',
        decision,
        ex.status,
        latency,
        ex.reasonCode,
        callReason(ex, call),
        sessionId,
        server,
      ),
    ]
  }
  if (!ex.forwarded) return [refusedBatchEntry(ex, timestamp, identity, tenant, latency, sessionId, server)]
  const out: AuditEntry[] = []
  let rest: string[] | null = null
  let restReason = ex.reason
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    if (!call.gated) {
      ;(rest ??= []).push(call.method || 'response')
      // What the answer phase noted on an ungated call (a tools/list that hid entries).
      restReason = joinReasons(restReason, call.reason)
      continue
    }
    const decision = ex.decision ?? 'allow'
    out.push(
      entry(
        timestamp,
        `${ex.requestId}/${i}`,
        identity,
        tenant,
        call.method,
        call.target,
        decision,
        ex.status,
        latency,
        ex.reasonCode,
        callReason(ex, call),
        sessionId,
        server,
      ),
    )
  }
  if (rest !== null) {
    const decision = ex.decision ?? 'passthrough'
    out.push(
      entry(
        timestamp,
        `${ex.requestId}/rest`,
        identity,
        tenant,
        rest.join(','),
        '',
        decision,
        ex.status,
        latency,
        ex.reasonCode,
        restReason,
        sessionId,
        server,
      ),
    )
  }
  return out
}

/**
 * The reason of one call's entry: the request's, then what the answer phase noted on the call (how
 * many entries its list hid). A call that was not forwarded has the request's alone: it leads with
 * the refusal (the policy rule that denied it, or why the budget throttled it, even when policy
 * would also have denied it: the decision is `throttled`).
 */
function callReason(ex: Exchange, call: RpcCall | null): string {
  if (call === null || !ex.forwarded) return ex.reason
  return joinReasons(ex.reason, call.reason)
}

/**
 * The one entry of a batch that never reached the upstream: its plain request_id, the distinct
 * methods in order of first appearance, and as `tool` the target of the first element a stage
 * singled out (a policy denial), else of the first gated element.
 */
function refusedBatchEntry(
  ex: Exchange,
  timestamp: string,
  identity: string,
  tenant: string,
  latency: number,
  sessionId: string,
  server: string | null,
): AuditEntry {
  const calls = ex.calls
  const methods = new Set<string>()
  let refused: string | null = null
  let firstGated: string | null = null
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    methods.add(call.method || 'response')
    if (refused === null && call.reasonCode !== null) refused = call.target
    if (firstGated === null && call.gated) firstGated = call.target
  }
  const tool = refused ?? firstGated ?? ''
  // ex.batch is set only for a batch that parsed, so there is always at least one method here.
  return entry(
    timestamp,
    ex.requestId,
    identity,
    tenant,
    [...methods].join(','),
    tool,
    ex.decision ?? 'error',
    ex.status,
    latency,
    ex.reasonCode,
    ex.reason,
    sessionId,
    server,
  )
}

function entry(
  timestamp: string,
  requestId: string,
  identity: string,
  tenant: string,
  method: string,
  tool: string,
  decision: Decision,
  status: number,
  latency: number,
  reasonCode: ReasonCode | null,
  reason: string,
  sessionId: string,
  server: string | null,
): AuditEntry {
  const e: { -readonly [K in keyof AuditEntry]: AuditEntry[K] } = {
    timestamp,
    request_id: requestId,
    identity,
    tenant,
    method,
    tool,
    decision,
    status,
    latency_ms: latency,
  }
  if (reasonCode !== null) e.reason_code = reasonCode
  if (reason) e.reason = reason
  if (sessionId) e.session_id = sessionId
  if (server !== null) e.server = server
  return e
}

/**
 * The one entry of a request whose entries could not be built (auditEntries threw): only fields
 * that cannot fail, read defensively, so the request is still audited exactly once.
 */
export function failedEntry(ex: Exchange, nowMonoMs: number): AuditEntry {
  const latency = Math.round((nowMonoMs - ex.startedMonoMs) * 1000) / 1000
  const e: { -readonly [K in keyof AuditEntry]: AuditEntry[K] } = {
    timestamp: readSafely(() => new Date(ex.startedAtMs).toISOString(), new Date().toISOString()),
    request_id: ex.requestId,
    // Whatever made auditEntries throw may be on the principal: identity and tenant only when readable.
    identity: readSafely(() => ex.principal?.identity ?? '', ''),
    tenant: readSafely(() => ex.principal?.tenant ?? '', ''),
    method: readSafely(() => ex.req.method ?? '', ''),
    tool: '',
    decision: 'error',
    status: typeof ex.status === 'number' ? ex.status : 0,
    latency_ms: Number.isFinite(latency) ? latency : 0,
    reason_code: 'internal',
  }
  const reason = readSafely(() => ex.reason, '')
  if (reason !== '') e.reason = reason
  const server = readSafely(() => ex.server, '')
  if (server !== '') e.server = server
  return e
}

/** A string field for failedEntry: the value when it reads as a string, else the fallback. */
function readSafely(read: () => unknown, fallback: string): string {
  try {
    const value = read()
    return typeof value === 'string' ? value : fallback
  } catch {
    return fallback
  }
}
