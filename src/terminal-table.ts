import { codeEscape, escapeControls } from './escape'

/**
 * The one way a CLI shows a value on a terminal (`wardline audit`'s table, `wardline revoke --list`,
 * `wardline budget show|reset`): every character that could move the cursor, recolour or clear the
 * operator's terminal, start a line of its own, show a name reversed or hide part of it (controls, line
 * separators, bidirectional controls, every Default_Ignorable_Code_Point: escape.ts) written as
 * `\xNN`, `\uNNNN` or `\u{…}`, so `alice` followed by a tag character or U+034F never reads as `alice`
 * and an identity holding ESC [2J cannot clear the screen. Values come from callers' tokens and tool
 * names, and from rows anyone with SQL access wrote, so every cell goes through this, never around it.
 *
 * In a table, blank-looking characters are escaped too: every space separator but the plain space
 * (`\p{Zs}`: U+00A0, U+2003, U+3000…) and U+2800 (braille pattern blank, which is no space to Unicode
 * and passes the identity check), since a cell padded with spaces shows `alice\u2800` as `alice`. Not
 * in escapeControls: log lines and a model's text keep them, where no column padding hides them.
 */
export function terminalSafe(text: string): string {
  return escapeControls(text, false).replace(BLANK, blankEscape)
}

/** Space separators and U+2800; the plain space is matched too (a class cannot leave it out) and kept. */
const BLANK = /[\p{Zs}\u2800]/gu

function blankEscape(c: string): string {
  return c === ' ' ? c : codeEscape(c.codePointAt(0) as number)
}

/** A value cut to `width` characters, `…` marking the cut. */
export function cutCell(text: string, width: number): string {
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`
}

/** Column widths: each the widest of its heading and its (already safe) cells, at most its maximum. */
export function columnWidths(
  headings: readonly string[],
  rows: ReadonlyArray<readonly string[]>,
  maxWidths: readonly number[] = [],
): number[] {
  return headings.map((h, i) => {
    let width = h.length
    for (const row of rows) width = Math.max(width, row[i].length)
    return Math.min(maxWidths[i] ?? Infinity, width)
  })
}

/**
 * One line of aligned columns (two spaces apart) from cells already made safe: each cut to its width
 * and padded, numbers to the right; the last column is left ragged unless numeric.
 */
export function tableLine(cells: readonly string[], widths: readonly number[], numeric: ReadonlySet<number> = NONE): string {
  const last = cells.length - 1
  const text = cells.map((cell, i) => {
    const c = cutCell(cell, widths[i])
    if (i === last && !numeric.has(i)) return c
    return numeric.has(i) ? c.padStart(widths[i]) : c.padEnd(widths[i])
  })
  return text.join('  ').trimEnd()
}

const NONE: ReadonlySet<number> = new Set()

/** A whole table (headings, then rows) as lines without a final newline, every cell made terminal-safe. */
export function terminalTable(headings: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const safe = rows.map((row) => row.map(terminalSafe))
  const widths = columnWidths(headings, safe)
  return [headings, ...safe].map((row) => tableLine(row, widths)).join('\n')
}
