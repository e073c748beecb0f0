import { createReadStream } from 'node:fs'
import { createGunzip } from 'node:zlib'
import type { Readable } from 'node:stream'
import type { AuditEntry } from './entry'
import { type AuditFilter, AuditQueryError, type GroupColumn, type SummaryRow, asEntry, compareSummaryRows, matches } from './query'
import { DECISIONS } from '../pipeline/exchange'

/**
 * Longest line read. The gateway's own lines are far shorter (a tool name or reason is bounded by
 * max_body_bytes, 4 MiB by default), but the file is only a file: a line past this (a corrupted or
 * hostile file, a missing newline) is skipped and counted without ever being held in memory whole.
 */
export const MAX_LINE_BYTES = 16 * 1024 * 1024

/**
 * Most groups a JSONL summary holds. Past it, new groups are counted together in one row whose values
 * are `*other*`, so memory stays bounded by this many keys whatever the file holds.
 */
export const MAX_SUMMARY_GROUPS = 100_000
export const OTHER_GROUP = '*other*'

/** Lines that were not audit entries, reported on stderr after the rows. */
export interface SkippedLines {
  malformed: number
  tooLong: number
}

/**
 * The lines of a file, split on LF bytes (never inside a UTF-8 sequence, and the gateway escapes
 * U+2028/U+2029/U+0085, so LF is the only line end), each decoded on its own. A line longer than
 * maxLineBytes yields `null` once and its bytes are dropped as they arrive. `.gz` files (logrotate's
 * compress) are read through gunzip.
 */
export async function* fileLines(path: string, skipped: SkippedLines, maxLineBytes = MAX_LINE_BYTES): AsyncGenerator<string> {
  const raw = createReadStream(path, { highWaterMark: 256 * 1024 })
  const stream: Readable = path.endsWith('.gz') ? raw.pipe(createGunzip()) : raw
  if (stream !== raw) raw.on('error', (err) => stream.destroy(err))
  let parts: Buffer[] = []
  let length = 0
  let dropping = false
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      let start = 0
      let tail = false
      for (;;) {
        const nl = chunk.indexOf(0x0a, start)
        const end = nl < 0 ? chunk.length : nl
        if (!dropping) {
          if (length + (end - start) > maxLineBytes) {
            dropping = true
            parts = []
            length = 0
            skipped.tooLong++
          } else if (end > start) {
            parts.push(chunk.subarray(start, end))
            length += end - start
            tail = nl < 0
          }
        }
        if (nl < 0) break
        if (!dropping) {
          const line = parts.length === 1 ? parts[0].toString('utf8') : Buffer.concat(parts, length).toString('utf8')
          parts = []
          length = 0
          yield line
        }
        dropping = false
        start = nl + 1
      }
      // Copy what is kept of this chunk: a subarray would pin the whole 256 KiB chunk until the line ends.
      if (tail) parts[parts.length - 1] = Buffer.from(parts[parts.length - 1])
    }
    if (!dropping && length > 0) yield Buffer.concat(parts, length).toString('utf8') // a last line without its newline
  } catch (err) {
    throw fileError(path, err)
  } finally {
    stream.destroy()
    raw.destroy()
  }
}

function fileError(path: string, err: unknown): Error {
  const code = (err as { code?: unknown } | null)?.code
  if (code === 'ENOENT') return new AuditQueryError(`${path}: no such file (audit.output, or --file)`)
  if (code === 'EACCES') return new AuditQueryError(`${path}: permission denied`)
  if (code === 'EISDIR') return new AuditQueryError(`${path}: is a directory, not a JSONL audit file`)
  if (code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR')
    return new AuditQueryError(`${path}: not a readable gzip file (${(err as Error).message})`)
  return err instanceof Error ? err : new Error(String(err))
}

/** The audit entries of a JSONL file that match the filter, in file order; blank lines are ignored, others counted. */
export async function* jsonlEntries(path: string, filter: AuditFilter, skipped: SkippedLines): AsyncGenerator<AuditEntry> {
  for await (const line of fileLines(path, skipped)) {
    if (line.trim() === '') continue
    let entry: AuditEntry | null
    try {
      entry = asEntry(JSON.parse(line))
    } catch {
      entry = null
    }
    const ms = entry === null ? NaN : Date.parse(entry.timestamp)
    if (entry === null || Number.isNaN(ms)) {
      skipped.malformed++
      continue
    }
    if (matches(filter, entry, ms)) yield entry
  }
}

/**
 * The rows to print: with a limit, the newest `limit` matches by timestamp (a heap of that many
 * entries, printed oldest first once the file is read); with limit 0, every match in file order as it
 * is read (the order requests ended in, which a long call makes differ from arrival order).
 */
export async function* jsonlRows(
  path: string,
  filter: AuditFilter,
  limit: number,
  skipped: SkippedLines,
  found: { more: boolean },
): AsyncGenerator<AuditEntry> {
  if (limit === 0) {
    yield* jsonlEntries(path, filter, skipped)
    return
  }
  // The newest by "timestamp", not the last lines: an entry is written when its request ends, so a long
  // call that arrived first comes after later ones in the file. A min-heap of `limit` entries on
  // (timestamp, line): the table's ("timestamp", id) order, since its ids follow the same writes.
  const heap: { ms: number; n: number; entry: AuditEntry }[] = []
  const less = (a: (typeof heap)[number], b: (typeof heap)[number]): boolean => a.ms < b.ms || (a.ms === b.ms && a.n < b.n)
  let seen = 0
  for await (const entry of jsonlEntries(path, filter, skipped)) {
    const item = { ms: Date.parse(entry.timestamp), n: seen++, entry }
    if (heap.length < limit) {
      heap.push(item)
      for (let i = heap.length - 1, up = (i - 1) >> 1; i > 0 && less(heap[i], heap[up]); i = up, up = (i - 1) >> 1) {
        ;[heap[i], heap[up]] = [heap[up], heap[i]]
      }
    } else if (less(heap[0], item)) {
      heap[0] = item
      for (let i = 0; ;) {
        const l = 2 * i + 1
        const m = l + 1 < heap.length && less(heap[l + 1], heap[l]) ? l + 1 : l
        if (l >= heap.length || !less(heap[m], heap[i])) break
        ;[heap[i], heap[m]] = [heap[m], heap[i]]
        i = m
      }
    }
  }
  found.more = seen > limit
  heap.sort((a, b) => (less(a, b) ? -1 : less(b, a) ? 1 : 0))
  for (const item of heap) yield item.entry
}

/**
 * Counts by group × decision over the whole file, in memory bounded by MAX_SUMMARY_GROUPS keys (the
 * rest fold into one `*other*` row). Returns the `limit` largest groups (0: all of them).
 */
export async function jsonlSummary(
  path: string,
  filter: AuditFilter,
  by: readonly GroupColumn[],
  limit: number,
  skipped: SkippedLines,
  maxGroups = MAX_SUMMARY_GROUPS,
): Promise<{ rows: SummaryRow[]; folded: boolean; groups: number }> {
  const groups = new Map<string, { group: string[]; counts: number[] }>()
  let folded = false
  const other = { group: by.map(() => OTHER_GROUP), counts: new Array<number>(DECISIONS.length).fill(0) }
  for await (const e of jsonlEntries(path, filter, skipped)) {
    const group = by.map((column) => e[column])
    // JSON of the values: no separator a value could contain can make two groups collide.
    const key = JSON.stringify(group)
    let slot = groups.get(key)
    if (slot === undefined) {
      if (groups.size >= maxGroups) {
        folded = true
        slot = other
      } else {
        slot = { group, counts: new Array<number>(DECISIONS.length).fill(0) }
        groups.set(key, slot)
      }
    }
    slot.counts[DECISIONS.indexOf(e.decision)]++ // asEntry admits only known decisions
  }
  const rows: SummaryRow[] = []
  for (const slot of folded ? [...groups.values(), other] : groups.values()) {
    rows.push({ group: slot.group, counts: slot.counts, total: slot.counts.reduce((a, b) => a + b, 0) })
  }
  rows.sort(compareSummaryRows)
  return { rows: limit === 0 ? rows : rows.slice(0, limit), folded, groups: rows.length }
}
