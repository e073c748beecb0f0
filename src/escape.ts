/**
 * Characters a terminal must never receive raw from a value a caller chose: control characters (C0,
 * DEL, C1: a lone U+009B starts an escape sequence on many terminals), line and paragraph separators,
 * the bidirectional overrides and isolates that make text read in another order, and the invisible
 * ones (zero-width space and joiners, word joiner, BOM, soft hyphen): a tool `admin\u200b` must not
 * read as `admin`. As the body of a regular-expression character class, for the patterns built on it.
 */
export const UNSAFE_CHARACTERS =
  '\\x00-\\x1f\\x7f-\\x9f\\xad\\u061c\\u180e\\u200b-\\u200f\\u2028\\u2029\\u2060-\\u2064\\u202a-\\u202e\\u2066-\\u2069\\ufeff'

const UNSAFE = new RegExp(`[${UNSAFE_CHARACTERS}]`, 'g')
const NAMED: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * Every unsafe character written as a visible escape: `\x1b`, `\u202e`, and with `named` (the log
 * lines) `\n`, `\r`, `\t`; without it (the audit table) those too as `\x0a`, `\x0d`, `\x09`.
 */
export function escapeControls(text: string, named = true): string {
  return text.replace(UNSAFE, (c) => {
    const name = named ? NAMED[c] : undefined
    if (name !== undefined) return name
    const code = c.charCodeAt(0)
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`
  })
}
