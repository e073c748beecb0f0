import { hasControlCharacters } from '../pipeline/exchange'

/** Identity and tenant limits: opaque strings, but bounded and printable (they end up in logs and keys). */
export const MAX_PRINCIPAL_BYTES = 256

/** With the u flag a surrogate pair is one code point, so only an unpaired half matches. */
const LONE_SURROGATE = /\p{Surrogate}/u

/**
 * Whitespace at either end, as String.prototype.trim sees it (`\s`: SP, the controls, U+00A0, U+1680,
 * U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF). HTTP parsers trim SP and HTAB around
 * a header value (RFC 9110 §5.5), so `" admin"` reaches the upstream as `X-Wardline-Identity: admin`
 * while the gateway budgets and judges `" admin"`; other stacks (Go's TrimSpace, .NET, many ORMs and
 * form libraries) trim the Unicode spaces as well. Every other character crosses unchanged (headerSafe
 * percent-encodes what is not printable ASCII, and `%` itself), so the ends are the only ambiguity.
 */
const EDGE_WHITESPACE = /^\s|\s$/

/**
 * Returns why a claimed identity or tenant is unacceptable, or null when it is fine. An accepted value
 * is exactly what the upstream reads back from X-Wardline-Identity / X-Wardline-Tenant after
 * `decodeURIComponent`, and what budget, policy and the audit trail see.
 */
export function checkPrincipal(kind: 'identity' | 'tenant', value: string): string | null {
  if (value.length === 0) return `${kind} is empty`
  if (Buffer.byteLength(value) > MAX_PRINCIPAL_BYTES) return `${kind} is longer than ${MAX_PRINCIPAL_BYTES} bytes`
  if (hasControlCharacters(value)) return `${kind} contains control characters`
  if (EDGE_WHITESPACE.test(value)) return `${kind} has leading or trailing whitespace`
  // A lone UTF-16 surrogate (a JSON "\ud800") has no UTF-8 form: it cannot become a header or a key.
  if (LONE_SURROGATE.test(value)) return `${kind} is not well-formed Unicode`
  return null
}

export const DEFAULT_TENANT = 'default'
