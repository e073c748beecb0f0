import { createHash } from 'node:crypto'
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, COMMA, OPEN_ARRAY, OPEN_OBJECT, QUOTE, isJsonSpace } from '../jsonrpc/json-bytes'

/**
 * The loop breaker's name for a call: a SHA-256 of the tool name and the canonical JSON of its
 * arguments, so a repeat bucket's key has a fixed size whatever the call holds (memory stays bounded,
 * and a Postgres key stays far below the index's row limit whatever tool name a caller sends) and two
 * calls share a bucket exactly when they name the same tool with the same JSON value.
 *
 * Canonical here means: members sorted by key (UTF-16 code units, as JSON.stringify compares them), no
 * whitespace, strings decoded and re-encoded (so "\u0041" and "A" are one string), a member name given
 * twice read as its last value (as JSON.parse, Python and Go read it, so the call the upstream runs is
 * the call counted), and numbers kept as written. Numbers are not parsed on purpose:
 * 12345678901234567890 and 12345678901234567891 are one double, and treating them as the same call would
 * refuse a call that was never repeated. `1.0` and `1` therefore count as different arguments; a loop
 * repeats its call byte for byte, so this costs nothing.
 *
 * Arguments longer than CANONICAL_MAX_BYTES are hashed as they are, byte for byte: canonicalizing
 * megabytes would hold the event loop for everyone (0.5 s for 4 MB, measured), and a loop repeats its
 * bytes anyway.
 *
 * `body` [start, end) is one JSON value the request scanner already validated (well formed, depth within
 * max_json_depth), so the walk below need not check what it reads. Absent arguments (start < 0) read as
 * `{}`: the MCP server runs both alike.
 */
export function callFingerprint(tool: string, body: Buffer, start: number, end: number): string {
  const hash = createHash('sha256').update(JSON.stringify(tool))
  if (start >= 0 && end - start > CANONICAL_MAX_BYTES) hash.update('raw:').update(body.subarray(start, end))
  else hash.update('canonical:').update(start < 0 ? '{}' : new Canonicalizer(body, start, end).value())
  return hash.digest('base64url')
}

/** Arguments up to this size are canonicalized (~10 ms at most); longer ones are hashed as sent. */
export const CANONICAL_MAX_BYTES = 64 * 1024

class Canonicalizer {
  constructor(
    private readonly b: Buffer,
    private i: number,
    private readonly end: number,
  ) {}

  value(): string {
    this.skipSpace()
    const c = this.b[this.i]
    if (c === OPEN_OBJECT) return this.object()
    if (c === OPEN_ARRAY) return this.array()
    if (c === QUOTE) return JSON.stringify(this.string())
    // A number, true, false or null: as written, up to the next delimiter.
    const from = this.i
    while (this.i < this.end && !isDelimiter(this.b[this.i])) this.i++
    return this.b.toString('latin1', from, this.i)
  }

  private object(): string {
    this.i++ // {
    this.skipSpace()
    if (this.b[this.i] === CLOSE_OBJECT) {
      this.i++
      return '{}'
    }
    const byKey = new Map<string, string>()
    for (;;) {
      this.skipSpace()
      const key = this.string()
      this.skipSpace()
      this.i++ // :
      byKey.set(key, this.value()) // a name given twice keeps its last value
      this.skipSpace()
      if (this.b[this.i++] !== COMMA) break // }
    }
    const members = [...byKey]
    members.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0))
    let out = '{'
    for (let m = 0; m < members.length; m++) out += (m === 0 ? '' : ',') + JSON.stringify(members[m][0]) + ':' + members[m][1]
    return out + '}'
  }

  private array(): string {
    this.i++ // [
    this.skipSpace()
    if (this.b[this.i] === CLOSE_ARRAY) {
      this.i++
      return '[]'
    }
    let out = '['
    for (let first = true; ; first = false) {
      out += (first ? '' : ',') + this.value()
      this.skipSpace()
      if (this.b[this.i++] !== COMMA) break // ]
    }
    return out + ']'
  }

  /** A string token at the cursor, decoded. */
  private string(): string {
    const from = this.i++
    let escaped = false
    while (this.b[this.i] !== QUOTE) {
      if (this.b[this.i] === BACKSLASH) {
        escaped = true
        this.i++
      }
      this.i++
    }
    this.i++
    return escaped ? (JSON.parse(this.b.toString('utf8', from, this.i)) as string) : this.b.toString('utf8', from + 1, this.i - 1)
  }

  private skipSpace(): void {
    while (isJsonSpace(this.b[this.i])) this.i++
  }
}

function isDelimiter(c: number): boolean {
  return c === COMMA || c === CLOSE_OBJECT || c === CLOSE_ARRAY || isJsonSpace(c)
}
