import type { Pool, QueryConfig } from 'pg'
import type { AuditEntry } from './entry'
import type { AuditSink } from './sink'

/**
 * One statement per batch, whatever its size: the columns travel as arrays and are unnested on the
 * server. ON CONFLICT (request_id) DO NOTHING makes every write idempotent, so a batch retried after
 * a timeout (it may have committed) or replayed from the spill file never adds a second row.
 */
const INSERT = `INSERT INTO audit_entries
  (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms, reason, session_id)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::integer[], $9::double precision[], $10::text[], $11::text[])
ON CONFLICT (request_id) DO NOTHING`

/** Client-side bound on one batch: past it the writer retries (and, failing that, spills). */
const WRITE_TIMEOUT_MS = 10_000

/** Writes audit entries to the audit_entries table (columns mirror the JSONL fields). */
export class PostgresAuditSink implements AuditSink {
  readonly name = 'postgres'

  constructor(private readonly pool: Pool) {}

  async write(entries: readonly AuditEntry[]): Promise<void> {
    if (entries.length === 0) return
    const n = entries.length
    const columns: unknown[][] = Array.from({ length: 11 }, () => new Array(n))
    for (let i = 0; i < n; i++) {
      const e = entries[i]
      columns[0][i] = e.request_id
      columns[1][i] = e.timestamp
      columns[2][i] = e.identity
      columns[3][i] = e.tenant
      columns[4][i] = e.method
      columns[5][i] = e.tool
      columns[6][i] = e.decision
      columns[7][i] = e.status
      columns[8][i] = e.latency_ms
      columns[9][i] = e.reason ?? null
      columns[10][i] = e.session_id ?? null
    }
    await this.pool.query({ name: 'wardline_audit_insert', text: INSERT, values: columns, query_timeout: WRITE_TIMEOUT_MS } as QueryConfig)
  }

  /** The pool is shared and closed by compose.ts, after every writer has flushed. */
  close(): Promise<void> {
    return Promise.resolve()
  }
}
