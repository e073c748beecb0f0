import { VARSPEC } from '../mcp/resource-uri'

/**
 * RFC 6570 URI Template expansion (levels 1–4, string values), for judging a completion value as the
 * URI a client would read with it (completion-filter.ts). An expression with a variable the gateway
 * has no value for becomes a hole: the result is then the family of URIs with any text in each hole,
 * `parts` holding the literal text between the holes (one part: no hole, an exact URI).
 */

/** RFC 6570 §3.2.1, appendix A: what each operator puts first and between values, and what it encodes. */
interface Operator {
  readonly first: string
  readonly separator: string
  /** `;`, `?`, `&`: each value is written `name=value`. */
  readonly named: boolean
  /** What a named empty value is written as: `;x` but `?x=`. */
  readonly ifEmpty: string
  /** `+`, `#`: reserved characters and percent-escapes are kept as they are. */
  readonly reserved: boolean
}

const OPERATORS: ReadonlyMap<string, Operator> = new Map([
  ['', { first: '', separator: ',', named: false, ifEmpty: '', reserved: false }],
  ['+', { first: '', separator: ',', named: false, ifEmpty: '', reserved: true }],
  ['#', { first: '#', separator: ',', named: false, ifEmpty: '', reserved: true }],
  ['.', { first: '.', separator: '.', named: false, ifEmpty: '', reserved: false }],
  ['/', { first: '/', separator: '/', named: false, ifEmpty: '', reserved: false }],
  [';', { first: ';', separator: ';', named: true, ifEmpty: '', reserved: false }],
  ['?', { first: '?', separator: '&', named: true, ifEmpty: '=', reserved: false }],
  ['&', { first: '&', separator: '&', named: true, ifEmpty: '=', reserved: false }],
])

interface VarSpec {
  readonly name: string
  /** `{var:3}`: the first 3 characters of the value; 0 for none. */
  readonly prefix: number
}

interface Expression {
  readonly operator: Operator
  readonly vars: readonly VarSpec[]
}

/** A template read once: literal text and expressions, in order. */
export class UriTemplate {
  private readonly pieces: ReadonlyArray<string | Expression>

  /** Throws nothing: text that is not an expression (a lone brace) stays literal. */
  constructor(readonly template: string) {
    const pieces: Array<string | Expression> = []
    let from = 0
    for (const match of template.matchAll(EXPRESSION)) {
      if (match.index > from) pieces.push(template.slice(from, match.index))
      const body = match[1]
      const op = OPERATORS.has(body[0]) ? body[0] : ''
      const vars = body
        .slice(op.length)
        .split(',')
        .map((spec) => {
          const colon = spec.indexOf(':')
          if (colon >= 0) return { name: spec.slice(0, colon), prefix: Number(spec.slice(colon + 1)) }
          return { name: spec.endsWith('*') ? spec.slice(0, -1) : spec, prefix: 0 }
        })
      pieces.push({ operator: OPERATORS.get(op)!, vars })
      from = match.index + match[0].length
    }
    if (from < template.length) pieces.push(template.slice(from))
    this.pieces = pieces
  }

  /** Every variable the template names. */
  get variables(): string[] {
    return this.pieces.flatMap((p) => (typeof p === 'string' ? [] : p.vars.map((v) => v.name)))
  }

  /**
   * The template expanded with `values`, each value encoded by `encode` (rfc6570Encode for the RFC's
   * own rules). An expression naming a variable absent from `values` is a hole.
   */
  expand(values: ReadonlyMap<string, string>, encode: Encoder): string[] {
    const parts = ['']
    for (const piece of this.pieces) {
      if (typeof piece === 'string') {
        parts[parts.length - 1] += piece
        continue
      }
      if (piece.vars.some((v) => !values.has(v.name))) {
        parts.push('')
        continue
      }
      const op = piece.operator
      const written = piece.vars.map((v) => {
        const raw = values.get(v.name)!
        const value = encode(v.prefix > 0 ? [...raw].slice(0, v.prefix).join('') : raw, op.reserved)
        if (!op.named) return value
        return value === '' ? v.name + op.ifEmpty : `${v.name}=${value}`
      })
      parts[parts.length - 1] += op.first + written.join(op.separator)
    }
    return parts
  }
}

export type Encoder = (value: string, reserved: boolean) => string

/**
 * RFC 6570 §3.2.1: unreserved characters stay; with `+` and `#` reserved characters and
 * percent-escapes stay too; everything else is percent-encoded as UTF-8 in upper-case hex.
 */
export function rfc6570Encode(value: string, reserved: boolean): string {
  let out = ''
  for (let i = 0; i < value.length; i++) {
    const c = value[i]
    if (UNRESERVED.test(c) || (reserved && RESERVED.test(c))) out += c
    else if (reserved && c === '%' && HEX2.test(value.slice(i + 1, i + 3))) out += c
    else {
      const code = value.codePointAt(i)!
      const char = String.fromCodePoint(code)
      if (char.length === 2) i++
      // A lone surrogate cannot be UTF-8: encoded as U+FFFD, as TextEncoder writes it.
      out += [...UTF8.encode(char)].map((b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('')
    }
  }
  return out
}

/** How the official TypeScript SDK's UriTemplate.expand encodes (encodeURIComponent, encodeURI for `+` and `#`). */
export function sdkEncode(value: string, reserved: boolean): string {
  try {
    return reserved ? encodeURI(value) : encodeURIComponent(value)
  } catch {
    return rfc6570Encode(value, reserved) // a lone surrogate: the SDK throws, so no client reads this URI
  }
}

/** The value as it is, for a client that inserts it without encoding. */
export const rawEncode: Encoder = (value) => value

/** `{` operator? varspec *( "," varspec ) `}` (RFC 6570 §2.2–2.4), as the parser admits it; anything else stays literal. */
const EXPRESSION = new RegExp(`\\{([+#./;?&]?${VARSPEC}(?:,${VARSPEC})*)\\}`, 'g')
const UTF8 = new TextEncoder()
const UNRESERVED = /[A-Za-z0-9\-._~]/
const RESERVED = /[:/?#[\]@!$&'()*+,;=]/
const HEX2 = /^[0-9A-Fa-f]{2}$/
