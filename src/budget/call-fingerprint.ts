import { canonicalSha256 } from './canonical-json'

/**
 * The loop breaker's name for a call: a SHA-256 of the tool name and the canonical JSON of its
 * arguments (canonical-json.ts), so a repeat bucket's key has a fixed size whatever the call holds
 * (memory stays bounded, and a Postgres key stays far below the index's row limit whatever tool name
 * a caller sends) and two calls share a bucket exactly when they name the same tool with the same
 * JSON value: key order, whitespace, string escapes and number spellings (`1`, `1.0`, `1e0`, `10e-1`)
 * make no difference; numbers a double cannot hold exactly are kept as written, so
 * 12345678901234567890 and 12345678901234567891 stay two calls (canonical-number.ts).
 *
 * Arguments of any size are canonicalized whole, in linear time: with a size cut-off past which
 * arguments are hashed as sent, whitespace padding past it would turn one call into many.
 *
 * `body` [start, end) is the arguments' value as the request scanner validated it. Absent arguments
 * (start < 0) read as `{}`: the MCP server runs both alike.
 *
 * `server` (with `servers:`) is part of the call: the same tool and arguments on two servers are two
 * calls, run by two programs. Null (`upstream:`) leaves the fingerprint as it always was.
 */
export function callFingerprint(tool: string, body: Buffer, start: number, end: number, server: string | null = null): string {
  // A name as a JSON string is self-delimiting: the server cannot run into the tool, nor the tool into
  // the arguments, and `"docs""search"` is no single JSON string, so it is no server-less prefix either.
  const prefix = server === null ? JSON.stringify(tool) : JSON.stringify(server) + JSON.stringify(tool)
  return canonicalSha256(prefix + 'canonical:', body, start, end)
}
