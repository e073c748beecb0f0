import type { Decision, Exchange } from '../pipeline/exchange'

/** The JSONL text of entries: one JSON object per line, each line ending in a newline. */
export function toJsonLines(entries: readonly AuditEntry[]): string {
  let text = ''
  for (const e of entries) text += JSON.stringify(e) + '\n'
  return text
}

/** One line of the audit trail. Key order is part of the format: build it with `auditEntries`. */
export interface AuditEntry {
  readonly timestamp: string
  readonly request_id: string
  readonly identity: string
  readonly tenant: string
  readonly method: string
  readonly tool: string
  readonly decision: Decision
  readonly status: number
  readonly latency_ms: number
  readonly reason?: string
  readonly session_id?: string
}

/**
 * The entries for one finished request: one for a single message or a request without a JSON-RPC
 * body; for a batch, one per gated element plus one for the rest (if any). Batch entries get
 * `<request_id>/<element index>` and `<request_id>/rest` so every request_id stays unique.
 */
export function auditEntries(ex: Exchange, nowMonoMs: number): AuditEntry[] {
  const timestamp = new Date(ex.startedAtMs).toISOString()
  const latency = Math.round((nowMonoMs - ex.startedMonoMs) * 1000) / 1000
  const identity = ex.principal?.identity ?? ''
  const tenant = ex.principal?.tenant ?? ''
  const sessionId = ex.sessionId
  const calls = ex.calls
  if (!ex.batch) {
    const call = calls.length === 1 ? calls[0] : null
    const method = call === null ? ex.req.method ?? '' : call.method || 'response'
    const decision = ex.decision ?? (call?.gated ? 'allow' : 'passthrough')
    return [entry(timestamp, ex.requestId, identity, tenant, method, call?.target ?? '', decision, ex.status, latency, call?.reason || ex.reason, sessionId)]
  }
  const out: AuditEntry[] = []
  let rest: string[] | null = null
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    if (!call.gated) {
      ;(rest ??= []).push(call.method || 'response')
      continue
    }
    const decision = ex.decision ?? 'allow'
    out.push(entry(timestamp, `${ex.requestId}/${i}`, identity, tenant, call.method, call.target, decision, ex.status, latency, call.reason || ex.reason, sessionId))
  }
  if (rest !== null) {
    const decision = ex.decision ?? 'passthrough'
    out.push(entry(timestamp, `${ex.requestId}/rest`, identity, tenant, rest.join(','), '', decision, ex.status, latency, ex.reason, sessionId))
  }
  return out
}

function entry(
  timestamp: string, requestId: string, identity: string, tenant: string, method: string, tool: string,
  decision: Decision, status: number, latency: number, reason: string, sessionId: string,
): AuditEntry {
  const e: { -readonly [K in keyof AuditEntry]: AuditEntry[K] } = {
    timestamp, request_id: requestId, identity, tenant, method, tool, decision, status, latency_ms: latency,
  }
  if (reason) e.reason = reason
  if (sessionId) e.session_id = sessionId
  return e
}
