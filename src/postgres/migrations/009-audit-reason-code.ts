import type { Migration } from './index'

/**
 * Version 9: `reason_code`, the stable code of why an entry has its decision (pipeline/reason.ts,
 * docs/gateway.md "Reason codes"), beside the free-text `reason`.
 *
 * The column is NULL for an ordinary allow or passthrough, as the JSONL line leaves the field out,
 * and for every row written before this version (and by a replica not yet upgraded during a rolling
 * upgrade, which inserts without it). Adding a nullable column without a default changes only the
 * catalogue: no row is rewritten, however large the table.
 *
 * The index serves `wardline audit --reason-code` as the version 5 indexes serve the other filters
 * (one range scan read backwards, newest first, no sort). It is partial, on the rows that have a code:
 * those are the refusals and failures, usually a small share of the trail, so an allowed call's insert
 * adds no index entry. Its build blocks writes to audit_entries like version 5's did (audit batches
 * queue, and spill past their bound, for that time).
 */
export const auditReasonCode: Migration = {
  version: 9,
  name: 'audit reason codes',
  sql: `
ALTER TABLE audit_entries ADD COLUMN reason_code text;
CREATE INDEX audit_entries_reason_code_time ON audit_entries (reason_code COLLATE "C", "timestamp", id) WHERE reason_code IS NOT NULL;
`,
}
