import type { Pool, QueryConfig } from 'pg'
import type { AuditEntry } from './entry'
import type { AuditSink, AuditWriteOptions } from './sink'

/**
 * One statement per batch, whatever its size: the columns travel as arrays and are unnested on the
 * server. ON CONFLICT (request_id) DO NOTHING makes every write idempotent, so a batch retried after
 * a timeout (it may have committed) or replayed from the spill file never adds a second row.
 */
const INSERT = `INSERT INTO audit_entries
  (request_id, "timestamp", identity, tenant, method, tool, decision, status, latency_ms, reason, session_id, reason_code, server)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::integer[], $9::double precision[], $10::text[], $11::text[], $12::text[], $13::text[])
ON CONFLICT (request_id) DO NOTHING`

/** Client-side bound on one batch: past it the writer retries (and, failing that, spills). */
const WRITE_TIMEOUT_MS = 10_000

/**
 * Postgres text cannot hold U+0000, and an audit field can carry a caller's bytes (a method or tool
 * name, a parse error quoting the body). Every text value is written with each NUL replaced by
 * U+FFFD (the Unicode replacement character), so no caller-controlled string can fail an insert. The
 * JSONL trail and the spill file keep the original (JSON escapes it as \u0000).
 */
export function pgText(value: string): string {
  return value.includes('\u0000') ? value.replaceAll('\u0000', '\uFFFD') : value
}

function text(value: unknown): unknown {
  return typeof value === 'string' ? pgText(value) : value
}

/**
 * SQLSTATE classes meaning "these values can never be stored" (22 data exception: bad encoding, a
 * malformed timestamp or number; 23 integrity constraint violation: a missing field), as opposed to
 * the database being unavailable.
 */
const REJECTED_CLASSES = new Set(['22', '23'])

/** Writes audit entries to the audit_entries table (columns mirror the JSONL fields). */
export class PostgresAuditSink implements AuditSink {
  readonly name = 'postgres'

  constructor(private readonly pool: Pool) {}

  async write(entries: readonly AuditEntry[], options: AuditWriteOptions = {}): Promise<void> {
    if (entries.length === 0) return
    const n = entries.length
    const columns = Array.from({ length: 13 }, () => new Array<unknown>(n))
    for (let i = 0; i < n; i++) {
      const e = entries[i]
      columns[0][i] = text(e.request_id)
      columns[1][i] = text(e.timestamp)
      columns[2][i] = text(e.identity)
      columns[3][i] = text(e.tenant)
      columns[4][i] = text(e.method)
      columns[5][i] = text(e.tool)
      columns[6][i] = text(e.decision)
      columns[7][i] = e.status
      columns[8][i] = e.latency_ms
      columns[9][i] = text(e.reason ?? null)
      columns[10][i] = text(e.session_id ?? null)
      columns[11][i] = text(e.reason_code ?? null)
      columns[12][i] = text(e.server ?? null)
    }
    const timeout = Math.max(1, Math.min(WRITE_TIMEOUT_MS, options.timeoutMs ?? WRITE_TIMEOUT_MS))
    await this.pool.query({ name: 'wardline_audit_insert', text: INSERT, values: columns, query_timeout: timeout } as QueryConfig)
  }

  /** True for an error the database raised about the values themselves: retrying cannot help. */
  rejects(err: unknown): boolean {
    const code = (err as { code?: unknown } | null)?.code
    return typeof code === 'string' && code.length === 5 && REJECTED_CLASSES.has(code.slice(0, 2))
  }

  /** The pool is shared and closed by postgres/open.ts's closer, after every writer has flushed. */
  close(): Promise<void> {
    return Promise.resolve()
  }
}
