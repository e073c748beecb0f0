import type { JsonRpcId } from './exchange'

/**
 * The key under which any MCP server could file a request id to route its answer, coarse enough to
 * hold every SDK's routing at once: two ids one server would confuse always get the same key here.
 *
 * - The official TypeScript SDK keys answer streams by the id's value: `1` and `1.0` are one number.
 * - The official Python SDK keys them by `str(message.id)` (mcp/server/streamable_http.py), so `1` and
 *   `"1"` are one key; pydantic's lax `int | str` validation may also read `"01"` or `" 1"` as 1.
 * - A server that parses ids into doubles confuses integers past 2^53 with their neighbours.
 *
 * So a string that reads as a finite number (after trimming, `_` between digits dropped as Python's
 * int() does) is keyed as that number, and a number by its double's shortest text (`-0` is `0`). The
 * gateway's parser admits only plain safe integers as numeric ids (jsonrpc/parse.ts), so the numeric
 * side is exact; it is the strings that collapse. Null is keyed as the string `null`. Coarser than any
 * one SDK on purpose: a false match costs a client that reuses an id in flight a 409, a missed one
 * leaks an unfiltered list.
 */
export function idKey(id: JsonRpcId): string {
  // String gives a double's shortest round-trip text, one per value (`-0` prints as `0`).
  if (typeof id === 'number') return String(id)
  if (id === null) return 'null'
  const trimmed = id.trim()
  if (trimmed === '' || !NUMERIC_START.test(trimmed)) return id
  const value = Number(trimmed.includes('_') ? trimmed.replace(DIGIT_UNDERSCORE, '$1') : trimmed)
  return Number.isFinite(value) ? String(value) : id
}

/** Number() reads decimals, exponents and 0x/0o/0b integers: all start with a sign, a digit or a dot. */
const NUMERIC_START = /^[+\-.0-9]/
const DIGIT_UNDERSCORE = /([0-9])_(?=[0-9])/g
