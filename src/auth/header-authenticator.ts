import type { Exchange } from '../pipeline/exchange'
import { DEFAULT_TENANT, principalProblem } from './principal'
import type { AuthResult, Authenticator } from './stage'

/**
 * `auth.mode: header`: trusts X-Wardline-Identity / X-Wardline-Tenant as sent. Only for a network
 * where something in front of the gateway has already authenticated the caller and sets them.
 */
export class HeaderAuthenticator implements Authenticator {
  authenticate(ex: Exchange): AuthResult {
    const identity = single(ex.req.headers['x-wardline-identity'])
    if (identity === undefined || identity === '') {
      return { failed: true, reason: 'missing X-Wardline-Identity header', bearerError: null }
    }
    const tenantHeader = single(ex.req.headers['x-wardline-tenant'])
    const tenant = tenantHeader === undefined || tenantHeader === '' ? DEFAULT_TENANT : tenantHeader
    const problem = principalProblem('identity', identity) ?? principalProblem('tenant', tenant)
    if (problem !== null) return { failed: true, reason: problem, bearerError: null }
    return { identity, tenant }
  }
}

function single(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value
}
