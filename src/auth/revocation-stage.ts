import type { AuthConfig } from '../config/types'
import type { Exchange, Principal } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { bearerChallenge } from './resource-metadata'
import { ALL_IDENTITIES, type Revocation, type RevocationList } from './revocations'

/**
 * Right after the auth stage, on every request (a token answered from the token cache included: the
 * cached principal carries its token's `jti` and `iat`, so a cache hit is judged like a fresh token):
 * a revoked principal gets 401 with the same challenge as any other unacceptable token (RFC 6750 §3.1
 * `invalid_token`), so a client drops the token or asks its user for another. The audit entry says
 * `unauthorized` with a reason naming the revocation that matched (identity, token jti, or tokens
 * issued before a time) and its end, when it has one; never the token.
 *
 * The list is read in memory: with none revoked the stage costs one property read.
 */
export function revocationStage(list: RevocationList, config: AuthConfig, onRefused?: () => void): Stage {
  const challenge = bearerChallenge(config)
  // One set of headers per challenge (one per server at most), made at its first refusal.
  const byChallenge = new Map<string, Readonly<Record<string, string>>>()
  const headersOf = (ex: Exchange): Readonly<Record<string, string>> => {
    const text = challenge(ex)
    let headers = byChallenge.get(text)
    if (headers === undefined) {
      headers = { 'www-authenticate': `${text}, error="invalid_token", error_description="revoked"`, 'cache-control': 'no-store' }
      byChallenge.set(text, headers)
    }
    return headers
  }
  return {
    name: 'revocation',
    run(ex: Exchange): Verdict {
      if (list.size === 0) return CONTINUE
      const principal = ex.principal
      if (principal === null) return CONTINUE
      const revocation = list.find(principal, Date.now())
      if (revocation === null) return CONTINUE
      onRefused?.()
      return revoked(revocation, principal, headersOf(ex))
    },
  }
}

function revoked(revocation: Revocation, principal: Principal, headers: Readonly<Record<string, string>>): Refusal {
  const end = revocation.until === null ? '' : ` until ${revocation.until}`
  const scope = revocation.kind !== 'jti' && revocation.identity === ALL_IDENTITIES ? ' (whole tenant)' : ''
  let what: string
  if (revocation.kind === 'jti') what = `revoked token (jti ${JSON.stringify(revocation.jti)})`
  else if (revocation.kind === 'issued_before') what = `revoked tokens issued before ${revocation.issued_before} (${issuedAtOf(principal)})`
  else what = 'revoked identity'
  return {
    status: 401,
    decision: 'unauthorized',
    code: 'auth.revoked',
    reason: `${what}${end}${scope}`,
    message: 'Unauthorized: revoked',
    headers,
  }
}

/** The refused token's `iat` for the audit reason, as an ISO time when it is one. */
function issuedAtOf(principal: Principal): string {
  const iat = principal.issuedAt
  if (iat === null || iat === undefined) return 'this one has no iat'
  const at = new Date(iat * 1000)
  return `this one issued ${Number.isNaN(at.getTime()) ? `at iat ${iat}` : at.toISOString()}`
}
