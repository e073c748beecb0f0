import type { Migration } from './index'

/**
 * Version 10: `server`, the name of the server (config `servers:`) a request was routed to, as the
 * JSONL line's `server` field.
 *
 * NULL for a gateway with `upstream:` alone (one server, no name), for a path that names no server,
 * for admin API entries, and for every row written before this version (or by a replica not yet
 * upgraded during a rolling upgrade, which inserts without it). A nullable column without a default
 * changes only the catalogue: no row is rewritten, however large the table.
 *
 * The index serves `wardline audit --server` as the version 5 indexes serve the other filters (one
 * range scan read backwards, newest first, no sort). Partial, on the rows that have a server: a
 * single-upstream gateway's inserts add no index entry, and an equality or LIKE on the column implies
 * NOT NULL, so the planner may use it. A server name is at most 32 characters (config/servers.ts):
 * the whole value fits in an index entry. Its build blocks writes to audit_entries as version 9's did.
 */
export const auditServer: Migration = {
  version: 10,
  name: 'audit server names',
  sql: `
ALTER TABLE audit_entries ADD COLUMN server text;
CREATE INDEX audit_entries_server_time ON audit_entries (server COLLATE "C", "timestamp", id) WHERE server IS NOT NULL;
`,
}
