import { hasControlCharacters } from '../pipeline/methods'

/** Identity and tenant limits: opaque strings, but bounded and printable (they end up in logs and keys). */
export const MAX_PRINCIPAL_BYTES = 256

/** Returns why a claimed identity or tenant is unacceptable, or null when it is fine. */
export function checkPrincipal(kind: 'identity' | 'tenant', value: string): string | null {
  if (value.length === 0) return `${kind} is empty`
  if (Buffer.byteLength(value) > MAX_PRINCIPAL_BYTES) return `${kind} is longer than ${MAX_PRINCIPAL_BYTES} bytes`
  if (hasControlCharacters(value)) return `${kind} contains control characters`
  return null
}

export const DEFAULT_TENANT = 'default'
