import type { AuditEntry } from '../../src/audit/entry'

/** An ordinary allowed tools/call entry with the given request id, and any field replaced by `extra`. */
export function auditEntry(id: string, extra: Partial<AuditEntry> = {}): AuditEntry {
  return {
    timestamp: '2026-11-29T00:00:00.000Z',
    request_id: id,
    identity: 'alice',
    tenant: 'acme',
    method: 'tools/call',
    tool: 'echo',
    decision: 'allow',
    status: 200,
    latency_ms: 1.5,
    ...extra,
  }
}

/**
 * The small trail the `wardline audit` tests query, from the JSONL file and from Postgres alike: 8
 * entries over the last three hours, oldest first, as the gateway appends them (three routed to a
 * server, the others from a single upstream). `ago(minutes)` gives
 * each timestamp.
 */
export function sampleTrail(ago: (minutes: number) => string): AuditEntry[] {
  return [
    auditEntry('r1', { timestamp: ago(180), identity: 'alice', tool: 'search' }),
    auditEntry('r2', {
      timestamp: ago(90),
      identity: 'bob',
      tenant: 'globex',
      tool: 'search',
      decision: 'throttled',
      status: 429,
      reason_code: 'budget.exceeded',
    }),
    auditEntry('r3', {
      timestamp: ago(50),
      identity: 'alice',
      tool: 'delete_repo',
      decision: 'deny',
      status: 403,
      reason_code: 'policy.denied',
      reason: 'rule 2: deny delete_*',
      server: 'docs',
    }),
    auditEntry('r4', { timestamp: ago(40), identity: 'alicia', tool: 'search', server: 'docs' }),
    auditEntry('r5', { timestamp: ago(30), identity: 'a%b_c', tool: 'x' }),
    auditEntry('r6', { timestamp: ago(20), identity: 'axbyc', tool: 'x', server: 'tickets' }),
    auditEntry('r7', {
      timestamp: ago(10),
      identity: 'alice',
      tool: 'search',
      decision: 'throttled',
      status: 429,
      reason_code: 'budget.repeat',
    }),
    auditEntry('r8', {
      timestamp: ago(5),
      identity: '',
      tenant: '',
      method: 'POST',
      tool: '',
      decision: 'unauthorized',
      status: 401,
      reason_code: 'auth.missing_token',
    }),
  ]
}
