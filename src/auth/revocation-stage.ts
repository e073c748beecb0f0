import type { AuthConfig } from '../config/types'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import type { Revocation, RevocationList } from './revocations'

/**
 * Right after the auth stage, on every request (a token answered from the token cache included):
 * a revoked principal gets 401 with the same challenge as any other unacceptable token (RFC 6750 §3.1
 * `invalid_token`), so a client drops the token or asks its user for another. The audit entry says
 * `unauthorized` with reason `revoked` (and its end, when it has one).
 *
 * The list is read in memory: with none revoked the stage costs one property read.
 */
export function revocationStage(list: RevocationList, config: AuthConfig, onRefused?: () => void): Stage {
  const challenge = `Bearer realm="wardline"${config.resourceMetadataUrl ? `, resource_metadata="${config.resourceMetadataUrl}"` : ''}`
  const headers = {
    'www-authenticate': `${challenge}, error="invalid_token", error_description="revoked"`,
    'cache-control': 'no-store',
  }
  return {
    name: 'revocation',
    run(ex: Exchange): Verdict {
      if (list.size === 0) return CONTINUE
      const principal = ex.principal
      if (principal === null) return CONTINUE
      const revocation = list.find(principal.tenant, principal.identity, Date.now())
      if (revocation === null) return CONTINUE
      onRefused?.()
      return revoked(revocation, headers)
    },
  }
}

function revoked(revocation: Revocation, headers: Readonly<Record<string, string>>): Refusal {
  const scope = revocation.identity === '*' ? ' (whole tenant)' : ''
  return {
    status: 401,
    decision: 'unauthorized',
    reason: revocation.until === null ? `revoked${scope}` : `revoked until ${revocation.until}${scope}`,
    message: 'Unauthorized: revoked',
    headers,
  }
}
