import { hasControlCharacters } from '../pipeline/methods'

/** Identity and tenant limits: opaque strings, but bounded and printable (they end up in logs and keys). */
export const MAX_PRINCIPAL_BYTES = 256

/** With the u flag a surrogate pair is one code point, so only an unpaired half matches. */
const LONE_SURROGATE = /\p{Surrogate}/u

/** Returns why a claimed identity or tenant is unacceptable, or null when it is fine. */
export function checkPrincipal(kind: 'identity' | 'tenant', value: string): string | null {
  if (value.length === 0) return `${kind} is empty`
  if (Buffer.byteLength(value) > MAX_PRINCIPAL_BYTES) return `${kind} is longer than ${MAX_PRINCIPAL_BYTES} bytes`
  if (hasControlCharacters(value)) return `${kind} contains control characters`
  // A lone UTF-16 surrogate (a JSON "\ud800") has no UTF-8 form: it cannot become a header or a key.
  if (LONE_SURROGATE.test(value)) return `${kind} is not well-formed Unicode`
  return null
}

export const DEFAULT_TENANT = 'default'
