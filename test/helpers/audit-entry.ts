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
