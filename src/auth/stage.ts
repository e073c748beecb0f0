import type { AuthConfig } from '../config/types'
import type { Exchange, Principal } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { bearerChallenge } from './resource-metadata'

/** What an authenticator concluded: the caller, or why not (for the audit reason and the 401). */
export type AuthResult = Principal | AuthFailure

export interface AuthFailure {
  readonly failed: true
  /** Says which check failed, never echoing the token. Safe to show the caller. */
  readonly reason: string
  /** RFC 6750 §3.1 error code when one applies: a token was presented and is not acceptable. */
  readonly bearerError: 'invalid_token' | 'invalid_request' | null
  /** For operators only (appended to the audit reason): the underlying cause, e.g. why a JWKS fetch failed. */
  readonly detail?: string
  /** The audit reason_code when it is not `auth.invalid_token`: no credentials at all, or no signing keys to check them with. */
  readonly code?: 'auth.missing_token' | 'auth.keys_unavailable'
}

/**
 * Turns a request into a Principal. Implementations do their costly work (importing keys, fetching a
 * JWKS) once, before the first request, and fail open to nothing: any doubt is an AuthFailure.
 */
export interface Authenticator {
  authenticate(ex: Exchange): AuthResult | Promise<AuthResult>
  close?(): void
}

export function isFailure(result: AuthResult): result is AuthFailure {
  return (result as AuthFailure).failed === true
}

/** Right after the Host/Origin check (http stage): no request reaches anything else without a verified caller. */
export function authStage(authenticator: Authenticator, config: AuthConfig): Stage {
  const challenge = bearerChallenge(config)
  return {
    name: 'auth',
    run(ex: Exchange) {
      // A CORS preflight never carries credentials (Fetch standard, CORS-preflight request): one from a
      // listed origin was answered by the http stage, one from any other origin refused there. What
      // still gets here without an Origin is no browser's preflight, so it needs a token like any request.
      const result = authenticator.authenticate(ex)
      // A cached token (and header mode) is known at once: no promise for the common case.
      return result instanceof Promise ? result.then((r) => verdictOf(ex, r, challenge)) : verdictOf(ex, result, challenge)
    },
  }
}

function verdictOf(ex: Exchange, result: AuthResult, challenge: (ex: Exchange) => string): Verdict {
  if (isFailure(result)) return unauthorized(result, challenge(ex))
  ex.principal = result
  return CONTINUE
}

/** RFC 6750 §3: error_description is printable ASCII without `"` and `\` (a claim name may be anything). */
const NOT_DESCRIPTION_CHAR = /[^\x20\x21\x23-\x5b\x5d-\x7e]/g

function describe(reason: string): string {
  return reason.replace(/"/g, "'").replace(NOT_DESCRIPTION_CHAR, '?')
}

function unauthorized(failure: AuthFailure, challenge: string): Refusal {
  const header = failure.bearerError
    ? `${challenge}, error="${failure.bearerError}", error_description="${describe(failure.reason)}"`
    : challenge
  return {
    status: 401,
    decision: 'unauthorized',
    code: failure.code ?? 'auth.invalid_token',
    reason: failure.detail === undefined ? failure.reason : `${failure.reason} (${failure.detail})`,
    message: `Unauthorized: ${failure.reason}`,
    headers: { 'www-authenticate': header, 'cache-control': 'no-store' },
  }
}
