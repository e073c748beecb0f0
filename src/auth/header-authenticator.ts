import type { Exchange } from '../pipeline/exchange'
import { DEFAULT_TENANT, checkPrincipal } from './principal'
import type { AuthResult, Authenticator } from './stage'

/**
 * `auth.mode: header`: trusts X-Wardline-Identity / X-Wardline-Tenant as sent. Only for a network
 * where something in front of the gateway has already authenticated the caller and sets them.
 */
export class HeaderAuthenticator implements Authenticator {
  authenticate(ex: Exchange): AuthResult {
    const identity = single(ex.req.headersDistinct['x-wardline-identity'])
    if (identity === null) return { failed: true, reason: 'more than one X-Wardline-Identity header', bearerError: null }
    if (identity === '')
      return { failed: true, reason: 'missing X-Wardline-Identity header', bearerError: null, code: 'auth.missing_token' }
    const tenantHeader = single(ex.req.headersDistinct['x-wardline-tenant'])
    if (tenantHeader === null) return { failed: true, reason: 'more than one X-Wardline-Tenant header', bearerError: null }
    const tenant = tenantHeader === '' ? DEFAULT_TENANT : tenantHeader
    const problem = checkPrincipal('identity', identity) ?? checkPrincipal('tenant', tenant)
    if (problem !== null) return { failed: true, reason: problem, bearerError: null }
    // No token: nothing a jti revocation can match, and no `iat` (an issued-before revocation refuses it).
    return { identity, tenant, tokenId: null, issuedAt: null }
  }
}

/**
 * The one value of a header as UTF-8 text ('' when absent, null when repeated: Node would join two
 * copies into "alice, bob", a caller nobody meant). Node reads header bytes as Latin-1, so a proxy's
 * raw UTF-8 (`José`) is decoded back here; a value that is not valid UTF-8 stays as Latin-1.
 */
function single(values: string[] | undefined): string | null {
  if (values === undefined) return ''
  if (values.length !== 1) return null
  const value = values[0]
  if (!/[\u0080-\u00ff]/.test(value)) return value
  const bytes = Buffer.from(value, 'latin1')
  const text = bytes.toString('utf8')
  return Buffer.from(text, 'utf8').equals(bytes) ? text : value
}
