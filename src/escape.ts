/**
 * Characters a terminal (or a model reading a refusal) must never receive raw from a value a caller
 * chose, as the body of a regular-expression character class for patterns built with the `u` flag:
 *
 * - every control character (`\p{Cc}`: C0, DEL and C1; a lone U+009B starts an escape sequence on
 *   many terminals, U+0085 is a line break to some readers) and the line and paragraph separators
 *   U+2028 / U+2029, which start a new line in most text views and to models;
 * - every Default_Ignorable_Code_Point (Unicode DerivedCoreProperties.txt): the characters a renderer
 *   shows as nothing. They include the bidirectional marks, embeddings, overrides and isolates that
 *   make text read in another order (U+061C, U+200E-200F, U+202A-202E, U+2066-2069), the zero-width
 *   space and joiners, the word joiner and BOM, the soft hyphen, U+034F (combining grapheme joiner),
 *   the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), the variation selectors (U+180B-180F,
 *   U+FE00-FE0F, U+E0100-E01EF) and the tag characters (U+E0000-E007F): `alice\u{e0041}` or
 *   `alice\u034f` must not read as `alice`. The property escape follows the Unicode version of the
 *   running Node (Node 20.20: Unicode 17; the list has not changed since Unicode 14, and test/escape.test.ts pins it);
 * - a lone UTF-16 surrogate (with the `u` flag only an unpaired half matches), which has no UTF-8 form
 *   and would reach the terminal as U+FFFD.
 */
export const UNSAFE_CHARACTERS = '\\p{Cc}\\u2028\\u2029\\p{Default_Ignorable_Code_Point}\\p{Surrogate}'

const UNSAFE = new RegExp(`[${UNSAFE_CHARACTERS}]`, 'gu')
const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * Every unsafe character written as a visible escape: `\x1b`, `\u202e`, `\u{e0041}` beyond the BMP,
 * and with `named` (the log lines) `\n`, `\r`, `\t`; without it (the CLI tables) those too as `\x0a`,
 * `\x0d`, `\x09`. The escape's own backslash is not escaped: where a reader must tell `\x1b` typed by
 * a caller from an escaped ESC, quote the value first (log.ts, quotedName).
 */
export function escapeControls(text: string, named = true): string {
  return text.replace(UNSAFE, (c) => (named ? NAMED[c] : undefined) ?? codeEscape(c.codePointAt(0) as number))
}

/** `\xNN`, `\uNNNN` or `\u{…}` for one code point: what escapeControls writes. */
export function codeEscape(code: number): string {
  if (code < 0x100) return `\\x${code.toString(16).padStart(2, '0')}`
  return code < 0x10000 ? `\\u${code.toString(16).padStart(4, '0')}` : `\\u{${code.toString(16)}}`
}

/**
 * JSON text with every unsafe character inside its strings written as a JSON escape (`\u202e`, a
 * surrogate pair's two halves for a tag character): the same value to a parser, nothing raw on a
 * terminal. JSON.stringify escapes C0 but leaves DEL, C1, U+2028/2029 and invisible characters raw.
 */
export function escapeJsonText(json: string): string {
  return json.replace(UNSAFE, (c) => {
    let out = ''
    for (let i = 0; i < c.length; i++) out += `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`
    return out
  })
}

/** Longest name, in characters of its quoted form between the quotes, that quotedName writes. */
export const MAX_QUOTED_NAME_CHARS = 64

const NAME_UNSAFE = new RegExp(`[${UNSAFE_CHARACTERS}"\\\\]`, 'u')

/**
 * A name the caller chose (a tool name), as text a model reads shows it (tool_refusals: result, MCP
 * 2025-06-18 "Tools", error handling): in double quotes, with `"` and `\` escaped so the name cannot
 * close its quotes, every unsafe character escaped (UNSAFE_CHARACTERS: a U+2028 in a name must not
 * start a "gateway notice" line of its own), and cut to MAX_QUOTED_NAME_CHARS characters, with `…`
 * after the closing quote when cut, so a name cannot fill the text with instructions. The cut falls
 * between whole characters and whole escapes, never inside one. The one function every producer of
 * such text uses for what a caller named.
 */
export function quotedName(name: string): string {
  // The usual name (short, printable): one test, no rebuilding.
  if (name.length <= MAX_QUOTED_NAME_CHARS && !NAME_UNSAFE.test(name)) return `"${name}"`
  let out = ''
  let shownChars = 0
  for (const c of name) {
    const escaped = c === '"' || c === '\\' ? `\\${c}` : NAME_UNSAFE.test(c) ? codeEscape(c.codePointAt(0) as number) : null
    shownChars += escaped === null ? 1 : escaped.length
    if (shownChars > MAX_QUOTED_NAME_CHARS) return `"${out}"…`
    out += escaped ?? c
  }
  return `"${out}"`
}
