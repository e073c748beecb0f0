import type { Decision, Exchange, RpcCall } from '../pipeline/exchange'

/**
 * The JSONL text of entries: one JSON object per line, each line ending in a newline. U+0085 (NEL),
 * U+2028 and U+2029, the line breaks JSON.stringify leaves raw (it escapes every C0 control), are
 * escaped: Python's str.splitlines(), JavaScript source and some log shippers treat them as line
 * breaks, so a caller's tool name or session id holding one would split its audit line in two for
 * those readers. Inside JSON they can only sit in a string, where `\u0085` reads back as the same
 * character. One scan per batch; nothing is copied when none is present.
 */
export function toJsonLines(entries: readonly AuditEntry[]): string {
  let text = ''
  for (const e of entries) text += JSON.stringify(e) + '\n'
  return LINE_BREAKS.test(text) ? text.replace(LINE_BREAKS_ALL, escapeLineBreak) : text
}

const LINE_BREAKS = /[\u0085\u2028\u2029]/
const LINE_BREAKS_ALL = /[\u0085\u2028\u2029]/g
function escapeLineBreak(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`
}

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
  readonly reason?: string
  readonly session_id?: string
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
 * body, or any request that was not forwarded (a refused 20 000-element batch once wrote
 * 20 000 entries and flushed real calls out of a full queue); for a forwarded batch, one per gated
 * element plus one for the rest (if any). Forwarded batch entries get `<request_id>/<element index>`
 * and `<request_id>/rest` so every request_id stays unique.
 */
export function auditEntries(ex: Exchange, nowMonoMs: number): AuditEntry[] {
  const timestamp = new Date(ex.startedAtMs).toISOString()
  const latency = Math.round((nowMonoMs - ex.startedMonoMs) * 1000) / 1000
  const identity = ex.principal?.identity ?? ''
  const tenant = ex.principal?.tenant ?? ''
  const sessionId = ex.sessionId
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
        callReason(ex, call),
        sessionId,
      ),
    ]
  }
  if (!ex.forwarded) return [refusedBatchEntry(ex, timestamp, identity, tenant, latency, sessionId)]
  const out: AuditEntry[] = []
  let rest: string[] | null = null
  let restReason = ex.reason
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    if (!call.gated) {
      ;(rest ??= []).push(call.method || 'response')
      // What the answer phase noted on an ungated call (a tools/list that hid entries).
      if (call.reason) restReason = restReason ? `${restReason}; ${call.reason}` : call.reason
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
        callReason(ex, call),
        sessionId,
      ),
    )
  }
  if (rest !== null) {
    const decision = ex.decision ?? 'passthrough'
    out.push(
      entry(timestamp, `${ex.requestId}/rest`, identity, tenant, rest.join(','), '', decision, ex.status, latency, restReason, sessionId),
    )
  }
  return out
}

/**
 * The reason of one call's entry: what a stage noted on the call (the policy rule that denied it, how
 * many entries its list hid), else the request's. A call the budget throttled says why it was
 * throttled, even when policy would also have denied it: the decision is `throttled`.
 */
function callReason(ex: Exchange, call: RpcCall | null): string {
  if (call === null || ex.decision === 'throttled') return ex.reason
  return call.reason || ex.reason
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
): AuditEntry {
  const calls = ex.calls
  const methods = new Set<string>()
  let refused: string | null = null
  let firstGated: string | null = null
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    methods.add(call.method || 'response')
    if (refused === null && call.reason) refused = call.target
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
    ex.reason,
    sessionId,
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
  reason: string,
  sessionId: string,
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
  if (reason) e.reason = reason
  if (sessionId) e.session_id = sessionId
  return e
}
