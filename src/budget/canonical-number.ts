import type { ByteSink } from './byte-sink'

const MINUS = 0x2d
const PLUS = 0x2b
const DOT = 0x2e
const ZERO = 0x30
const LOWER_E = 0x65

/**
 * Writes the JSON number `b[from, to)` (well formed, RFC 8259 §6) to `out` by its value, for the loop
 * breaker: `1`, `1.0`, `1e0`, `10e-1` and `100e-2` are one number, so an agent (or a caller) cannot
 * slip past repeat_limit by respelling one. Equal values give equal bytes; different values never do.
 *
 * Only numbers that round-trip exactly through a double are rewritten: those whose decimal value is
 * the value of the shortest text of the double nearest to them (`0.1` does, `12345678901234567890`
 * does not). Every JSON decoder an MCP server may use reads such a number as the same value whatever
 * its spelling. The others are written as they came: one double stands for both 12345678901234567890
 * and 12345678901234567891, but a server with exact integers (Python, Go's json.Number) runs them as
 * two calls, and merging them would refuse a call that was never repeated.
 *
 * The form written is the value's own: an optional `-`, its significant digits without leading or
 * trailing zeros, and `e<exponent>` when the exponent is not 0 (`1`, `125e-2`, `1e20`), so a number
 * never grows by more than a few bytes. Every zero (`-0`, `0.0e5`) is `0`. A number kept as written is
 * still a JSON number naming its own value, so it can never read as another number's canonical form.
 *
 * No allocation for the usual number (at most 15 significant digits, magnitude 1e-307 to 1e308);
 * 16 or 17 digits, or an extreme magnitude, take one parse and one format to check the round trip.
 */
export function writeCanonicalNumber(b: Buffer, from: number, to: number, out: ByteSink): void {
  let i = from
  const negative = b[i] === MINUS
  if (negative) i++
  const intStart = i
  while (i < to && isDigit(b[i])) i++
  const intEnd = i
  let fracStart = i
  let fracEnd = i
  if (i < to && b[i] === DOT) {
    fracStart = ++i
    while (i < to && isDigit(b[i])) i++
    fracEnd = i
  }
  let exponent = 0
  let exponentDigits = 0
  if (i < to) {
    i++ // e or E
    const sign = b[i] === MINUS ? -1 : 1
    if (b[i] === MINUS || b[i] === PLUS) i++
    while (i < to && b[i] === ZERO) i++
    for (; i < to; i++, exponentDigits++) exponent = exponent * 10 + (b[i] - ZERO)
    exponent *= sign
  }

  // The significant digits: from the first non-zero digit to the last, across the decimal point.
  let first = intStart
  while (first < intEnd && b[first] === ZERO) first++
  if (first === intEnd) {
    first = fracStart
    while (first < fracEnd && b[first] === ZERO) first++
    if (first === fracEnd) return out.byte(ZERO) // every zero, whatever its sign or exponent
  }
  let last = fracEnd - 1
  while (last >= fracStart && b[last] === ZERO) last--
  if (last < fracStart) {
    last = intEnd - 1
    while (b[last] === ZERO) last--
  }
  // More than 9 exponent digits (leading zeros aside): no double is anywhere near, so it cannot round-trip.
  if (exponentDigits > 9) return out.copy(b, from, to)
  // Positions in the digit string the integer and fraction parts make together (the point left out).
  const intLength = intEnd - intStart
  const firstAt = first < intEnd ? first - intStart : intLength + first - fracStart
  const lastAt = last < intEnd ? last - intStart : intLength + last - fracStart
  const digits = lastAt - firstAt + 1
  // value = <digits first..last> × 10^scale; its leading digit is at 10^(scale + digits - 1).
  const scale = exponent - (fracEnd - fracStart) + (intLength + fracEnd - fracStart - 1 - lastAt)
  const leading = scale + digits - 1
  // Up to 15 significant digits (DBL_DIG) within the normal range: decimal → double → shortest decimal
  // gives the same value back, always. Past 17, the shortest text of a double never has that many.
  if (digits > 17) return out.copy(b, from, to)
  if (digits > 15 || leading < -307 || leading > 307) {
    if (!roundTrips(b, from, to, first, last, intEnd, fracStart, scale)) return out.copy(b, from, to)
  }
  if (negative) out.byte(MINUS)
  if (first < intEnd && last >= fracStart) {
    out.copy(b, first, intEnd)
    out.copy(b, fracStart, last + 1)
  } else {
    out.copy(b, first, last + 1)
  }
  if (scale !== 0) {
    out.byte(LOWER_E)
    out.integer(scale)
  }
}

/**
 * Whether the number with these significant digits and scale is the value of the shortest text of
 * its nearest double (String(Number(text)) in JavaScript, which prints exactly that: ECMA-262
 * Number::toString). Only reached for the rare number past what DBL_DIG settles.
 */
function roundTrips(
  b: Buffer,
  from: number,
  to: number,
  first: number,
  last: number,
  intEnd: number,
  fracStart: number,
  scale: number,
): boolean {
  const value = Number(b.toString('latin1', from, to))
  if (!Number.isFinite(value) || value === 0) return false // overflow or underflow: not its own value
  const digits =
    first < intEnd && last >= fracStart
      ? b.toString('latin1', first, intEnd) + b.toString('latin1', fracStart, last + 1)
      : b.toString('latin1', first, last + 1)
  const shortest = String(Math.abs(value)) // e.g. 123, 0.000001, 1.2345678901234567e+21
  const e = shortest.indexOf('e')
  const mantissa = e < 0 ? shortest : shortest.slice(0, e)
  const dot = mantissa.indexOf('.')
  let all = dot < 0 ? mantissa : mantissa.slice(0, dot) + mantissa.slice(dot + 1)
  let shortestScale = (e < 0 ? 0 : Number(shortest.slice(e + 1))) - (dot < 0 ? 0 : mantissa.length - dot - 1)
  const lead = all.search(/[^0]/)
  all = all.slice(lead)
  const trail = all.length - all.search(/0*$/)
  shortestScale += trail
  all = all.slice(0, all.length - trail)
  return all === digits && shortestScale === scale
}

function isDigit(c: number): boolean {
  return c >= ZERO && c <= ZERO + 9
}
