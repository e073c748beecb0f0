import { isUtf8 } from 'node:buffer'
import { BACKSLASH, CLOSE_ARRAY, CLOSE_OBJECT, OPEN_ARRAY, OPEN_OBJECT, QUOTE, isJsonSpace } from './json-bytes'

/**
 * One member of an object the gateway reads: its decoded key and where its value sits in the body.
 * `kind` is the value's first byte (`{`, `[`, `"`, a digit or `-`, `t`, `f`, `n`).
 */
export interface Member {
  readonly key: string
  readonly start: number
  readonly end: number
  readonly kind: number
  /** A string value of plain ASCII without escapes: its bytes between the quotes are its text. */
  readonly plain: boolean
}

/**
 * One JSON-RPC message of the body, as far as the gateway reads it: the members of the message
 * object, of its `params` object and of `params.ref`, with their keys decoded and their values left
 * as byte ranges. Nothing else (arguments, results) is ever materialised.
 */
export interface ScannedMessage {
  /** The message's first byte: `{` for an object, anything else is not a JSON-RPC message. */
  readonly kind: number
  readonly members: Member[]
  params: Member[] | null
  ref: Member[] | null
  /** Which read object held more than MAX_MEMBERS members (reading stopped there), else null. */
  overflow: 'the message' | 'params' | 'params.ref' | null
}

/**
 * Most members read of the message, its params or params.ref. An MCP envelope has six at most and
 * the params of a gated call a handful; a body of 400,000 keys there would otherwise cost a key
 * string and a fold each, in one block the event loop could not interleave.
 */
export const MAX_MEMBERS = 64

export type ScanResult =
  | { readonly ok: true; readonly batch: boolean; readonly messages: readonly ScannedMessage[] }
  | { readonly ok: false; readonly malformed: boolean; readonly reason: string }

export interface ScanLimits {
  readonly maxJsonDepth: number
  readonly maxBatchMessages: number
}

// Parser states: what the next token may be.
const VALUE = 0
const VALUE_OR_END = 1 // just after `[`
const KEY = 2
const KEY_OR_END = 3 // just after `{`
const AFTER_VALUE = 4
const DONE = 5

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30
  if (c >= 0x61 && c <= 0x66) return c - 0x57
  if (c >= 0x41 && c <= 0x46) return c - 0x37
  return -1
}

class ScanError extends Error {
  constructor(
    readonly malformed: boolean,
    message: string,
  ) {
    super(message)
  }
}

/**
 * A validating JSON scanner that reads a body in one linear pass without recursion and without
 * building the tree: it refuses nesting past `maxJsonDepth` and batches past `maxBatchMessages` the
 * moment it meets them, and records only the members the gateway judges (see ScannedMessage).
 *
 * It accepts exactly RFC 8259 JSON in UTF-8, minus two things decoders disagree on: invalid UTF-8
 * (JSON.parse and Go substitute U+FFFD, Python refuses) and lone UTF-16 surrogate escapes (JSON.parse
 * and Python keep them, Go substitutes U+FFFD), so no string can read as two different names.
 *
 * `step` scans a slice and can be called again: a large body is scanned a slice at a time with the
 * event loop free in between (jsonrpc/stage.ts), so one caller's 4 MiB body never stalls the others.
 */
export class JsonScanner {
  private i = 0
  private state = VALUE
  private depth = 0
  /** Depth at which messages live: 1 for a single message, 2 inside a batch. */
  private messageDepth = 1
  private batch = false
  private readonly messages: ScannedMessage[] = []
  private current: ScannedMessage | null = null
  /** Per depth: the container type (`{` or `[`), where the value being read began, its member list and pending key. */
  // Eight levels from the start (an MCP call nests three or four deep): an array grown from one
  // element copies its store on the first assignment past it, four copies per request.
  private readonly containers: number[] = [0, 0, 0, 0, 0, 0, 0, 0]
  private readonly valueStart: number[] = [0, 0, 0, 0, 0, 0, 0, 0]
  private readonly collecting: Array<Member[] | null> = [null, null, null, null, null, null, null, null]
  private readonly pendingKey: string[] = ['', '', '', '', '', '', '', '']
  private result: ScanResult | null = null
  /** Set by string(): the last string token was plain ASCII without escapes. */
  private plain = true

  constructor(
    private readonly body: Buffer,
    private readonly limits: ScanLimits,
  ) {}

  /**
   * Scans at least `sliceBytes` more bytes (or to the end). Returns the result once the body has been
   * read whole or refused, else null (call again).
   */
  step(sliceBytes: number): ScanResult | null {
    if (this.result !== null) return this.result
    try {
      if (this.i === 0 && this.state === VALUE && !isUtf8(this.body)) throw new ScanError(true, 'body is not valid UTF-8')
      if (this.run(Math.min(this.body.length, this.i + sliceBytes))) {
        this.result = { ok: true, batch: this.batch, messages: this.messages }
      }
    } catch (err) {
      if (!(err instanceof ScanError)) throw err
      this.result = { ok: false, malformed: err.malformed, reason: err.message }
    }
    return this.result
  }

  /** Runs the state machine until `stop` (checked between tokens). True when the whole body was read. */
  private run(stop: number): boolean {
    const b = this.body
    const n = b.length
    let i = this.i
    for (;;) {
      while (i < n && isJsonSpace(b[i])) i++
      if (this.state === DONE) {
        if (i < n) throw this.malformed(i, 'unexpected data after the JSON value')
        this.i = i
        return true
      }
      if (i >= n) throw this.malformed(i, 'unexpected end of the body')
      if (i >= stop) {
        this.i = i
        return false
      }
      const c = b[i]
      switch (this.state) {
        case VALUE_OR_END:
          if (c === CLOSE_ARRAY) {
            i = this.close(i, OPEN_ARRAY)
            break
          }
          this.state = VALUE
          i = this.value(i, c)
          break
        case VALUE:
          i = this.value(i, c)
          break
        case KEY_OR_END:
          if (c === CLOSE_OBJECT) {
            i = this.close(i, OPEN_OBJECT)
            break
          }
          i = this.key(i, c)
          break
        case KEY:
          i = this.key(i, c)
          break
        default: {
          // AFTER_VALUE: a comma or the end of the container.
          const container = this.containers[this.depth]
          if (c === 0x2c) {
            this.state = container === OPEN_OBJECT ? KEY : VALUE
            i++
          } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
            i = this.close(i, c === CLOSE_OBJECT ? OPEN_OBJECT : OPEN_ARRAY)
          } else {
            throw this.malformed(i, container === OPEN_OBJECT ? "expected ',' or '}'" : "expected ',' or ']'")
          }
        }
      }
    }
  }

  /** A value starts at `i` (its first byte `c`). Returns where scanning goes on. */
  private value(i: number, c: number): number {
    const depth = this.depth
    this.valueStart[depth] = i
    if (depth === 0 && c === OPEN_ARRAY) {
      this.batch = true
      this.messageDepth = 2
    } else if (depth === this.messageDepth - 1) {
      if (this.batch && this.messages.length >= this.limits.maxBatchMessages) {
        throw new ScanError(false, `batch has more than ${this.limits.maxBatchMessages} messages (max_batch_messages)`)
      }
      this.current = { kind: c, members: [], params: null, ref: null, overflow: null }
      this.messages.push(this.current)
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (depth + 1 > this.limits.maxJsonDepth) {
        throw new ScanError(false, `JSON nested deeper than ${this.limits.maxJsonDepth} levels (max_json_depth)`)
      }
      this.depth = depth + 1
      this.containers[depth + 1] = c
      this.collecting[depth + 1] = c === OPEN_OBJECT ? this.membersFor(depth + 1) : null
      this.state = c === OPEN_OBJECT ? KEY_OR_END : VALUE_OR_END
      return i + 1
    }
    let end: number
    if (c === QUOTE) end = this.string(i)
    else if (c === 0x2d || isDigit(c)) end = this.number(i)
    else if (c === 0x74) end = this.literal(i, 'true')
    else if (c === 0x66) end = this.literal(i, 'false')
    else if (c === 0x6e) end = this.literal(i, 'null')
    else throw this.malformed(i, 'expected a value')
    this.valueDone(end)
    return end
  }

  /** Which member list an object opened at `depth` fills: the message, its params, or params.ref. */
  private membersFor(depth: number): Member[] | null {
    const message = this.current
    if (message === null || message.kind !== OPEN_OBJECT) return null
    const m = this.messageDepth
    if (depth === m) return message.members
    if (depth === m + 1 && this.collecting[m] === message.members && this.pendingKey[m] === 'params') {
      message.params = []
      return message.params
    }
    if (depth === m + 2 && message.params !== null && this.collecting[m + 1] === message.params && this.pendingKey[m + 1] === 'ref') {
      message.ref = []
      return message.ref
    }
    return null
  }

  /** The value at the current depth ended at `end` (exclusive). */
  private valueDone(end: number): void {
    const depth = this.depth
    if (depth === 0) {
      this.state = DONE
      return
    }
    const members = this.collecting[depth]
    if (members !== null && this.containers[depth] === OPEN_OBJECT) {
      const start = this.valueStart[depth]
      const kind = this.body[start]
      members.push({ key: this.pendingKey[depth], start, end, kind, plain: kind === QUOTE && this.plain })
    }
    this.state = AFTER_VALUE
  }

  private close(i: number, open: number): number {
    if (this.containers[this.depth] !== open) throw this.malformed(i, 'mismatched bracket')
    this.collecting[this.depth] = null
    this.depth--
    this.valueDone(i + 1)
    return i + 1
  }

  private key(i: number, c: number): number {
    if (c !== QUOTE) throw this.malformed(i, 'expected a string key')
    let j = this.string(i)
    const members = this.collecting[this.depth]
    if (members !== null) {
      if (members.length < MAX_MEMBERS) {
        this.pendingKey[this.depth] = this.decode(i, j, this.plain)
      } else {
        // Stop reading this object: the message is refused for it (see jsonrpc/parse.ts), and the rest of the
        // body is only validated.
        const message = this.current as ScannedMessage
        message.overflow ??= members === message.members ? 'the message' : members === message.params ? 'params' : 'params.ref'
        this.collecting[this.depth] = null
      }
    }
    const b = this.body
    while (j < b.length && isJsonSpace(b[j])) j++
    if (b[j] !== 0x3a) throw this.malformed(j, "expected ':' after a key")
    this.state = VALUE
    return j + 1
  }

  /** The decoded text of the string token [start, end), quotes included in the range. */
  private decode(start: number, end: number, plain: boolean): string {
    return plain ? plainText(this.body, start + 1, end - 1) : (JSON.parse(this.body.toString('utf8', start, end)) as string)
  }

  /**
   * Scans the string token starting at the quote at `i` and returns its end; sets `plain` when it is
   * ASCII without escapes (its bytes are its text).
   */
  private string(i: number): number {
    const b = this.body
    const n = b.length
    let plain = true
    let j = i + 1
    for (;;) {
      if (j >= n) throw this.malformed(i, 'unterminated string')
      const c = b[j]
      if (c === QUOTE) {
        this.plain = plain
        return j + 1
      }
      if (c === BACKSLASH) {
        plain = false
        const e = b[j + 1]
        if (e === 0x75) {
          const unit = this.hex4(j + 2)
          j += 6
          if (unit >= 0xdc00 && unit <= 0xdfff) throw this.malformed(j - 6, 'lone UTF-16 surrogate escape')
          if (unit >= 0xd800 && unit <= 0xdbff) {
            if (b[j] !== BACKSLASH || b[j + 1] !== 0x75) throw this.malformed(j - 6, 'lone UTF-16 surrogate escape')
            const low = this.hex4(j + 2)
            if (low < 0xdc00 || low > 0xdfff) throw this.malformed(j - 6, 'lone UTF-16 surrogate escape')
            j += 6
          }
        } else if (e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) {
          j += 2
        } else {
          throw this.malformed(j, 'invalid escape in a string')
        }
      } else if (c < 0x20) {
        throw this.malformed(j, 'control character in a string')
      } else {
        if (c >= 0x80) plain = false
        j++
      }
    }
  }

  private hex4(at: number): number {
    const b = this.body
    let unit = 0
    for (let k = 0; k < 4; k++) {
      const h = at + k < b.length ? hexValue(b[at + k]) : -1
      if (h < 0) throw this.malformed(at, 'invalid \\u escape')
      unit = unit * 16 + h
    }
    return unit
  }

  /** RFC 8259 §6: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
  private number(i: number): number {
    const b = this.body
    let j = i
    if (b[j] === 0x2d) j++
    if (b[j] === 0x30) j++
    else if (isDigit(b[j])) while (isDigit(b[j])) j++
    else throw this.malformed(i, 'invalid number')
    if (b[j] === 0x2e) {
      j++
      if (!isDigit(b[j])) throw this.malformed(i, 'invalid number')
      while (isDigit(b[j])) j++
    }
    if (b[j] === 0x65 || b[j] === 0x45) {
      j++
      if (b[j] === 0x2b || b[j] === 0x2d) j++
      if (!isDigit(b[j])) throw this.malformed(i, 'invalid number')
      while (isDigit(b[j])) j++
    }
    return j
  }

  private literal(i: number, word: string): number {
    const b = this.body
    for (let k = 0; k < word.length; k++) {
      if (b[i + k] !== word.charCodeAt(k)) throw this.malformed(i, 'invalid literal')
    }
    return i + word.length
  }

  private malformed(at: number, what: string): ScanError {
    return new ScanError(true, `${what} at byte ${at}`)
  }
}

/**
 * Strings nearly every message holds, returned without allocating: crossing into Buffer.toString
 * costs more than the whole scan of a small body, and a tools/call has a dozen such strings.
 */
const COMMON = [
  'jsonrpc',
  'id',
  'method',
  'params',
  'result',
  'error',
  'name',
  'arguments',
  'uri',
  'ref',
  'type',
  '_meta',
  'cursor',
  'argument',
  'context',
  'progressToken',
  '2.0',
  'tools/call',
  'tools/list',
  'resources/read',
  'resources/list',
  'prompts/get',
  'prompts/list',
  'ping',
  'initialize',
  'notifications/initialized',
  'ref/prompt',
  'ref/resource',
]
const COMMON_BY_LENGTH: string[][] = []
for (const word of COMMON) (COMMON_BY_LENGTH[word.length] ??= []).push(word)

/** The text of plain ASCII bytes [start, end) (no escapes): a common string, or a fresh one. */
export function plainText(b: Buffer, start: number, end: number): string {
  const candidates = COMMON_BY_LENGTH[end - start]
  if (candidates !== undefined) {
    for (let k = 0; k < candidates.length; k++) {
      const word = candidates[k]
      let i = 0
      while (i < word.length && b[start + i] === word.charCodeAt(i)) i++
      if (i === word.length) return word
    }
  }
  return b.toString('latin1', start, end)
}

/** Scans a whole body at once (tests, small bodies). */
export function scanJson(body: Buffer, limits: ScanLimits): ScanResult {
  return new JsonScanner(body, limits).step(Number.POSITIVE_INFINITY) as ScanResult
}
