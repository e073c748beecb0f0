import { Client } from 'pg'
import { describeError } from '../errors'
import { DECISIONS, type Decision } from '../pipeline/exchange'
import type { Glob } from '../glob'
import type { AuditEntry } from './entry'
import { type AuditFilter, AuditQueryError, type GroupColumn, type SummaryRow } from './query'

/** Rows fetched from the cursor per round trip: what the CLI holds at a time, whatever the result's size. */
export const FETCH_ROWS = 500

/** Server-side bound on each statement: a summary over years of rows may be slow, but never hangs a terminal forever. */
const STATEMENT_TIMEOUT_MS = 5 * 60_000

/**
 * A transaction left idle this long (a pager the operator stopped reading) is ended by the server: its
 * snapshot would otherwise hold back vacuum of every table, budget_buckets' churn included.
 */
const IDLE_IN_TRANSACTION_MS = 10 * 60_000

/** The audit query indexes arrived with this schema version (migration 005). */
const INDEXED_SCHEMA_VERSION = 5

/** The reason_code column arrived with this schema version (migration 009). */
export const REASON_CODE_SCHEMA_VERSION = 9

/** The server column arrived with this schema version (migration 010). */
export const SERVER_SCHEMA_VERSION = 10

/** Characters of `tool` in its index (migration 005): a B-tree entry cannot hold a caller's 3 KB target. */
const TOOL_INDEX_PREFIX = 200

/** One SQL statement and its parameters. */
export interface Sql {
  readonly text: string
  readonly values: readonly unknown[]
}

/**
 * A glob as a LIKE pattern with `!` as the escape character: `*` becomes `%`, and the pattern's own
 * `%`, `_` and `!` are escaped, so `100%_done*` matches only names that start with "100%_done".
 * (`!` rather than the default `\`: one escape rule whatever standard_conforming_strings says.)
 */
export function likePattern(pattern: string): string {
  return pattern.replace(/[!%_]/g, '!$&').replaceAll('*', '%')
}

/** The WHERE clause of a filter. Every value is a parameter; only column names (fixed here) are written into the text. */
function where(filter: AuditFilter, values: unknown[]): string {
  const conditions: string[] = []
  const param = (value: unknown): string => {
    values.push(value)
    return `$${values.length}`
  }
  const glob = (column: GroupColumn, g: Glob | null): void => {
    if (g === null) return
    // COLLATE "C" on both sides: it is the indexes' collation (migration 005), byte order is what the
    // policy glob compares, and a LIKE prefix is an index range only under it.
    if (column === 'tool') {
      // The index holds left(tool, 200): the prefix finds the rows, the whole value is compared after.
      const chars = [...g.pattern.split('*')[0]]
      const head = chars.slice(0, TOOL_INDEX_PREFIX).join('')
      const prefix = `left(tool, ${TOOL_INDEX_PREFIX}) COLLATE "C"`
      // Exact: one index value, so rows come in time order. Shorter than the prefix, the prefix alone
      // is the whole value (a second condition would halve the planner's estimate into a sort).
      if (g.exact) conditions.push(`${prefix} = ${param(head)}`)
      else if (head !== '') conditions.push(`${prefix} LIKE ${param(`${likePattern(head)}%`)} ESCAPE '!'`)
      if (g.exact && chars.length < TOOL_INDEX_PREFIX) return
    }
    if (g.exact) conditions.push(`${column} COLLATE "C" = ${param(g.pattern)}`)
    else conditions.push(`${column} COLLATE "C" LIKE ${param(likePattern(g.pattern))} ESCAPE '!'`)
  }
  glob('identity', filter.identity)
  glob('tenant', filter.tenant)
  glob('tool', filter.tool)
  if (filter.server !== null) {
    // Equality and LIKE imply NOT NULL, so the partial index of migration 010 serves both; `*` alone
    // (every routed request) says so itself.
    const g = filter.server
    if (g.exact) conditions.push(`server COLLATE "C" = ${param(g.pattern)}`)
    else if (g.any) conditions.push('server IS NOT NULL')
    else conditions.push(`server COLLATE "C" LIKE ${param(likePattern(g.pattern))} ESCAPE '!'`)
  }
  if (filter.decisions !== null) {
    conditions.push(
      filter.decisions.length === 1
        ? `decision COLLATE "C" = ${param(filter.decisions[0])}`
        : `decision COLLATE "C" = ANY(${param(filter.decisions)}::text[])`,
    )
  }
  if (filter.reasonCodes !== null) {
    // Equality implies NOT NULL, so the partial index of migration 009 serves it.
    conditions.push(
      filter.reasonCodes.length === 1
        ? `reason_code COLLATE "C" = ${param(filter.reasonCodes[0])}`
        : `reason_code COLLATE "C" = ANY(${param(filter.reasonCodes)}::text[])`,
    )
  }
  if (filter.sinceMs !== null) conditions.push(`"timestamp" >= ${param(new Date(filter.sinceMs).toISOString())}::timestamptz`)
  if (filter.untilMs !== null) conditions.push(`"timestamp" < ${param(new Date(filter.untilMs).toISOString())}::timestamptz`)
  return conditions.length === 0 ? '' : `WHERE ${conditions.join(' AND ')}`
}

const COLUMNS = `"timestamp", request_id, identity, tenant, method, tool, decision, status, latency_ms, reason_code, reason, session_id, server`

/** The columns a schema at `version` has; a column it lacks reads NULL, as every row there would hold. */
function columnsAt(version: number): string {
  let columns = COLUMNS
  if (version < REASON_CODE_SCHEMA_VERSION) columns = columns.replace('reason_code', 'NULL::text AS reason_code')
  if (version < SERVER_SCHEMA_VERSION) columns = columns.replace(/server$/, 'NULL::text AS server')
  return columns
}

/**
 * The entries to print, oldest first. With a limit: the newest `limit` matches (read backwards along
 * an index, stopping at `limit` + 1; the outer query puts those few back in time order, and
 * `matched` says whether there was one more, which is then dropped). With 0: every match, oldest
 * first, read forwards (the cursor streams it).
 */
export function entriesQuery(filter: AuditFilter, limit: number, schemaVersion = SERVER_SCHEMA_VERSION): Sql {
  const values: unknown[] = []
  const clause = where(filter, values)
  const columns = columnsAt(schemaVersion)
  if (limit === 0) return { text: `SELECT ${columns} FROM audit_entries ${clause} ORDER BY "timestamp", id`, values }
  values.push(limit + 1)
  return {
    text: `SELECT ${COLUMNS}, count(*) OVER () AS matched FROM (SELECT id, ${columns} FROM audit_entries ${clause}
      ORDER BY "timestamp" DESC, id DESC LIMIT $${values.length}) newest ORDER BY "timestamp", id`,
    values,
  }
}

/** Counts by the grouping columns × decision, largest total first (GROUP BY on the server). */
export function summaryQuery(filter: AuditFilter, by: readonly GroupColumn[], limit: number): Sql {
  const values: unknown[] = []
  const clause = where(filter, values)
  const counts = DECISIONS.map((d) => `count(*) FILTER (WHERE decision = '${d}') AS "${d}"`).join(', ')
  const columns = by.join(', ')
  const order = by.map((c) => `${c} COLLATE "C"`).join(', ')
  // groups: how many there are in all (the window runs after GROUP BY, before LIMIT).
  let text = `SELECT ${columns}, ${counts}, count(*) AS total, count(*) OVER () AS groups FROM audit_entries ${clause} GROUP BY ${columns} ORDER BY total DESC, ${order}`
  if (limit > 0) {
    values.push(limit)
    text += ` LIMIT $${values.length}`
  }
  return { text, values }
}

interface EntryRow {
  timestamp: Date
  request_id: string
  identity: string
  tenant: string
  method: string
  tool: string
  decision: Decision
  status: number
  latency_ms: number
  reason_code: string | null
  reason: string | null
  session_id: string | null
  server: string | null
}

/** A row as the JSONL trail has it (same keys, same order; absent reason_code, reason, session_id and server omitted). */
function toEntry(r: EntryRow): AuditEntry {
  const e: { -readonly [K in keyof AuditEntry]: AuditEntry[K] } = {
    timestamp: r.timestamp.toISOString(),
    request_id: r.request_id,
    identity: r.identity,
    tenant: r.tenant,
    method: r.method,
    tool: r.tool,
    decision: r.decision,
    status: r.status,
    latency_ms: r.latency_ms,
  }
  if (r.reason_code !== null) e.reason_code = r.reason_code
  if (r.reason !== null) e.reason = r.reason
  if (r.session_id !== null) e.session_id = r.session_id
  if (r.server !== null) e.server = r.server
  return e
}

/**
 * A read-only connection of its own (never the gateway's pool): `wardline audit` runs beside the
 * gateways, from an operator's shell. Warnings (an old schema) go to `warn`.
 */
export class AuditDatabase {
  /** The schema version of the database (wardline_schema_migrations), read once at open. */
  private version = 0

  private constructor(private readonly client: Client) {}

  static async open(dsn: string, source: string, warn: (line: string) => void): Promise<AuditDatabase> {
    const client = new Client({
      connectionString: dsn,
      connectionTimeoutMillis: 5000,
      statement_timeout: STATEMENT_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
      application_name: 'wardline audit',
    })
    client.on('error', () => undefined) // a connection lost between queries fails the next query instead
    try {
      await client.connect()
    } catch (err) {
      await client.end().catch(() => undefined)
      // The DSN is never echoed: it may hold a password.
      throw new AuditQueryError(`postgres unreachable (postgres.dsn of ${source}): ${describeError(err)}`)
    }
    const db = new AuditDatabase(client)
    try {
      // Timestamps are parsed from the server's text: a database whose default DateStyle is SQL or
      // German would give rows whose time node-postgres cannot read. ISO whatever the database says.
      await client.query(`SET DateStyle = 'ISO, MDY'`)
      const version = await client.query<{ v: number | null }>('SELECT max(version)::int AS v FROM wardline_schema_migrations')
      const v = version.rows[0].v ?? 0
      db.version = v
      if (v < INDEXED_SCHEMA_VERSION) {
        warn(
          `wardline audit: the database schema is at version ${v}: the audit query indexes (version ${INDEXED_SCHEMA_VERSION}) are missing, so filtered queries scan the table; start a gateway of this release once to add them`,
        )
      }
    } catch (err) {
      await db.close()
      if ((err as { code?: unknown }).code === '42P01') {
        throw new AuditQueryError(
          `no Wardline schema in the database of ${source} (postgres.dsn): a gateway with features.postgres_storage creates it at its first start`,
        )
      }
      throw new AuditQueryError(`postgres query failed: ${describeError(err)}`)
    }
    return db
  }

  /**
   * The statement's rows through a server-side cursor, FETCH_ROWS at a time, inside one read-only
   * transaction (a cursor lives in its transaction): the CLI never holds more than one fetch, and
   * the first rows print while the rest are still on the server.
   */
  async *rows<R>(sql: Sql): AsyncGenerator<R> {
    const c = this.client
    await this.run('BEGIN READ ONLY')
    let done = false
    try {
      await this.run(`DECLARE wardline_audit NO SCROLL CURSOR FOR ${sql.text}`, sql.values)
      for (;;) {
        const batch = await this.run<R>(`FETCH ${FETCH_ROWS} FROM wardline_audit`)
        for (const row of batch) yield row
        if (batch.length < FETCH_ROWS) break
      }
      done = true
    } finally {
      // An early stop (EPIPE, an error) rolls back: nothing was written, and the cursor closes with it.
      await c.query(done ? 'COMMIT' : 'ROLLBACK').catch(() => undefined)
    }
  }

  /** The entries to print; `found.more` is set when more rows match than the limit let through. */
  async *entries(filter: AuditFilter, limit: number, found: { more: boolean }): AsyncGenerator<AuditEntry> {
    this.checkColumns(filter)
    let first = true
    const sql = entriesQuery(filter, limit, this.version)
    for await (const row of this.rows<EntryRow & { matched?: string }>(sql)) {
      if (first && limit > 0 && Number(row.matched) > limit) {
        found.more = true // the oldest of limit + 1: fetched only to learn there are more
        first = false
        continue
      }
      first = false
      yield toEntry(row)
    }
  }

  /** Summary rows, largest first; `found.groups` is how many groups matched in all. */
  async *summary(filter: AuditFilter, by: readonly GroupColumn[], limit: number, found: { groups: number }): AsyncGenerator<SummaryRow> {
    this.checkColumns(filter)
    for await (const row of this.rows<Record<string, string>>(summaryQuery(filter, by, limit))) {
      found.groups = Number(row.groups)
      yield { group: by.map((c) => row[c]), counts: DECISIONS.map((d) => Number(row[d])), total: Number(row.total) }
    }
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => undefined)
  }

  /** --reason-code or --server on a schema without the column: said plainly rather than as Postgres' "column does not exist". */
  private checkColumns(filter: AuditFilter): void {
    if (filter.reasonCodes !== null && this.version < REASON_CODE_SCHEMA_VERSION) {
      throw new AuditQueryError(
        `--reason-code: the database schema is at version ${this.version}, and reason codes arrived with version ${REASON_CODE_SCHEMA_VERSION}; start a gateway of this release once to add them`,
      )
    }
    if (filter.server !== null && this.version < SERVER_SCHEMA_VERSION) {
      throw new AuditQueryError(
        `--server: the database schema is at version ${this.version}, and server names arrived with version ${SERVER_SCHEMA_VERSION}; start a gateway of this release once to add them`,
      )
    }
  }

  private async run<R>(text: string, values?: readonly unknown[]): Promise<R[]> {
    try {
      return (await this.client.query({ text, values: values as unknown[] | undefined })).rows as R[]
    } catch (err) {
      throw new AuditQueryError(`postgres query failed: ${describeError(err)}`)
    }
  }
}
