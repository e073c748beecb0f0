import type { Migration } from './index'

/**
 * Version 5: indexes for `wardline audit` filters and for retention.
 *
 * Each of (identity | tenant | tool | decision, "timestamp", id) serves "rows of X in a time range,
 * newest first" as one index range scan read backwards, with no sort: the CLI's query orders by
 * ("timestamp", id) and stops at --limit, so it reads about --limit index entries however large the
 * table is. id is last so the order is total (two entries of one millisecond) and the index alone
 * gives it. The "timestamp" index of version 1 serves queries without those filters and the
 * retention worker's "older than" delete.
 *
 * A glob with a leading `*` (`--identity '*bot'`) cannot use these (a B-tree needs a fixed prefix):
 * such a query falls back to the "timestamp" index plus a filter. A trailing-star glob (`alice*`)
 * uses them through LIKE with COLLATE "C" (a prefix range is valid only under byte order).
 *
 * The tool index is on the first 200 characters of `tool` (at most 800 bytes), not the whole value:
 * `tool` is the caller's target (a tool name, a resource URI: a `data:` URI or a long path is an
 * ordinary request), bounded only by max_body_bytes, and a B-tree entry holds at most 2704 bytes, so
 * a whole-value index made one call with a 3 KB target fail its entire audit batch ("index row size
 * exceeds btree maximum"). Queries (audit/query-postgres.ts) find rows through the prefix and compare
 * the whole value after it. identity and tenant are at most 256 bytes (auth/principal.ts) and
 * decision one of six words: their indexes stay whole.
 *
 * Cost: four more index entries per inserted row (the insert path writes batches of hundreds of
 * rows in one statement, off the request path; measured in docs/operations.md). CREATE INDEX (not
 * CONCURRENTLY: every migration runs in a transaction) blocks writes to audit_entries while it
 * builds: on a large table, audit batches queue (and spill past their bound) for that time.
 */
export const auditQueries: Migration = {
  version: 5,
  name: 'audit query indexes',
  sql: `
CREATE INDEX audit_entries_identity_time ON audit_entries (identity COLLATE "C", "timestamp", id);
CREATE INDEX audit_entries_tenant_time ON audit_entries (tenant COLLATE "C", "timestamp", id);
CREATE INDEX audit_entries_tool_time ON audit_entries ((left(tool, 200)) COLLATE "C", "timestamp", id);
CREATE INDEX audit_entries_decision_time ON audit_entries (decision COLLATE "C", "timestamp", id);
`,
}
