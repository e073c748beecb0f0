/**
 * How many times the header `name` (lower-case) appears in Node's raw [name, value, …] list. Field
 * names compare ASCII case-insensitively (RFC 9110 §5.1), without a lower-cased copy per header: the
 * check runs on every request for the Authorization header.
 */
export function rawHeaderCount(raw: readonly string[], name: string): number {
  let count = 0
  for (let i = 0; i < raw.length; i += 2) if (sameFieldName(raw[i], name)) count++
  return count
}

function sameFieldName(candidate: string, lower: string): boolean {
  if (candidate.length !== lower.length) return false
  if (candidate === lower) return true
  for (let i = 0; i < lower.length; i++) {
    const c = candidate.charCodeAt(i)
    const t = lower.charCodeAt(i)
    // An upper-case ASCII letter is its lower-case one minus 0x20; nothing else folds.
    if (c !== t && !(t >= 0x61 && t <= 0x7a && c === t - 0x20)) return false
  }
  return true
}
