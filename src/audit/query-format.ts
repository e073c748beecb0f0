import { once } from 'node:events'
import { DECISIONS, type Decision } from '../pipeline/exchange'
import { columnWidths, tableLine, terminalSafe } from '../terminal-table'
import { type AuditEntry, toJsonLines } from './entry'
import type { GroupColumn, SummaryRow } from './query'

export const FORMATS = ['table', 'jsonl', 'csv'] as const
export type Format = (typeof FORMATS)[number]

/** Without --format: a table for a person at a terminal, JSONL for a pipe or a file (the trail's own format). */
export function defaultFormat(stdoutIsTTY: boolean | undefined): Format {
  return stdoutIsTTY === true ? 'table' : 'jsonl'
}

/**
 * stdout with its backpressure honoured: text is gathered up to 64 KiB per write, and a write the
 * stream cannot take yet waits for `drain`, so a slow reader (`| less`) holds the query back instead
 * of the CLI buffering the whole answer in memory.
 */
export class Output {
  private pending = ''

  constructor(private readonly stream: NodeJS.WritableStream) {}

  async write(text: string): Promise<void> {
    this.pending += text
    if (this.pending.length >= 64 * 1024) await this.flush()
  }

  async flush(): Promise<void> {
    if (this.pending === '') return
    const text = this.pending
    this.pending = ''
    if (!this.stream.write(text)) await once(this.stream, 'drain')
  }
}

/** Rows a table measures its column widths on; later rows are cut to those widths. */
const TABLE_PAGE = 1000
const ENTRY_HEADINGS = ['TIME', 'IDENTITY', 'TENANT', 'METHOD', 'TOOL', 'DECISION', 'STATUS', 'MS', 'REASON'] as const
/** Widest a column grows; a longer value is cut with "…" (the JSONL and CSV forms keep it whole). */
const ENTRY_MAX_WIDTHS = [24, 32, 24, 24, 40, 12, 6, 10, 80]

/**
 * Aligned columns, measured on the first TABLE_PAGE rows, the last column left ragged; every cell made
 * terminal-safe (terminal-table.ts). JSONL escapes line breaks anyway, and CSV is data for a program,
 * kept as it is.
 */
class Table {
  private widths: number[] | null = null
  private page: string[][] = []

  constructor(
    private readonly out: Output,
    private readonly headings: readonly string[],
    private readonly maxWidths: readonly number[],
    /** Columns aligned to the right (numbers). */
    private readonly numeric: ReadonlySet<number>,
  ) {}

  async add(cells: readonly string[]): Promise<void> {
    const safe = cells.map(terminalSafe)
    if (this.widths !== null) return this.out.write(this.line(safe))
    this.page.push(safe)
    if (this.page.length >= TABLE_PAGE) await this.measure()
  }

  async end(): Promise<void> {
    if (this.widths === null) await this.measure()
  }

  private async measure(): Promise<void> {
    this.widths = columnWidths(this.headings, this.page, this.maxWidths)
    await this.out.write(this.line(this.headings))
    for (const row of this.page) await this.out.write(this.line(row))
    this.page = []
  }

  private line(cells: readonly string[]): string {
    return `${tableLine(cells, this.widths as number[], this.numeric)}\n`
  }
}

const CSV_ENTRY_COLUMNS = [
  'timestamp',
  'request_id',
  'identity',
  'tenant',
  'method',
  'tool',
  'decision',
  'status',
  'latency_ms',
  'reason',
  'session_id',
  // Last: a column added after the others keeps every earlier one where scripts that read by position expect it.
  'reason_code',
  'server',
] as const

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, a quote, CR or LF, quotes doubled. A text
 * field starting with =, +, -, @, TAB or CR gets a leading `'`, so a spreadsheet shows it as text
 * instead of running it as a formula (OWASP "CSV injection"): identities and tool names come from
 * callers and tokens. Numbers are written as they are.
 */
export function csvField(value: string | number): string {
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : ''
  const text = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text
}

function csvLine(fields: ReadonlyArray<string | number>): string {
  return `${fields.map(csvField).join(',')}\r\n`
}

/** Writes entries in `format` as they come; returns how many. */
export async function writeEntries(entries: AsyncIterable<AuditEntry>, format: Format, out: Output): Promise<number> {
  let n = 0
  if (format === 'jsonl') {
    for await (const e of entries) {
      await out.write(toJsonLines([e]))
      n++
    }
  } else if (format === 'csv') {
    await out.write(csvLine(CSV_ENTRY_COLUMNS))
    for await (const e of entries) {
      await out.write(csvLine(CSV_ENTRY_COLUMNS.map((k) => e[k] ?? '')))
      n++
    }
  } else {
    const table = new Table(out, ENTRY_HEADINGS, ENTRY_MAX_WIDTHS, new Set([6, 7]))
    for await (const e of entries) {
      const time = e.timestamp.replace('T', ' ').replace(/Z$/, '')
      await table.add([time, e.identity, e.tenant, e.method, e.tool, e.decision, String(e.status), String(e.latency_ms), e.reason ?? ''])
      n++
    }
    if (n > 0) await table.end()
  }
  await out.flush()
  return n
}

/** Writes summary rows: the grouping columns, one count per decision shown, and the total. */
export async function writeSummary(
  rows: AsyncIterable<SummaryRow>,
  by: readonly GroupColumn[],
  decisions: readonly Decision[],
  format: Format,
  out: Output,
): Promise<number> {
  const shown = decisions.map((d) => DECISIONS.indexOf(d))
  let n = 0
  if (format === 'jsonl') {
    for await (const r of rows) {
      const o: Record<string, string | number> = {}
      by.forEach((c, i) => (o[c] = r.group[i]))
      for (const i of shown) o[DECISIONS[i]] = r.counts[i]
      o.total = r.total
      await out.write(`${JSON.stringify(o)}\n`)
      n++
    }
  } else if (format === 'csv') {
    await out.write(csvLine([...by, ...decisions, 'total']))
    for await (const r of rows) {
      await out.write(csvLine([...r.group, ...shown.map((i) => r.counts[i]), r.total]))
      n++
    }
  } else {
    const headings = [...by.map((c) => c.toUpperCase()), ...decisions.map((d) => d.toUpperCase()), 'TOTAL']
    const numeric = new Set(headings.map((_, i) => i).filter((i) => i >= by.length))
    const table = new Table(
      out,
      headings,
      headings.map((_, i) => (i < by.length ? 40 : 14)),
      numeric,
    )
    for await (const r of rows) {
      await table.add([...r.group, ...shown.map((i) => String(r.counts[i])), String(r.total)])
      n++
    }
    if (n > 0) await table.end()
  }
  await out.flush()
  return n
}
