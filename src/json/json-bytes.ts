/**
 * The bytes (and UTF-16 code units: the same values) that give JSON its structure, for the code that
 * reads JSON without materialising it: the request scanner (scan.ts, jsonrpc/parse.ts), the loop breaker's
 * canonical arguments (budget/canonical-json.ts) and the list filter's cuts (policy/list-filter.ts).
 */
export const QUOTE = 0x22
export const BACKSLASH = 0x5c
export const COMMA = 0x2c
export const OPEN_OBJECT = 0x7b
export const CLOSE_OBJECT = 0x7d
export const OPEN_ARRAY = 0x5b
export const CLOSE_ARRAY = 0x5d

/** RFC 8259 §2: the only four whitespace bytes; a BOM or NBSP is not one (Go and Python agree). */
export function isJsonSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09
}
