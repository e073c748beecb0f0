import { type JWTPayload, type JWTVerifyOptions, decodeProtectedHeader, errors, jwtVerify } from 'jose'
import type { JwtConfig } from '../config/types'
import { WardlineError, describeError } from '../errors'
import type { Logger } from '../log'
import { rawHeaderCount } from '../raw-headers'
import type { Exchange } from '../pipeline/exchange'
import { type VerificationKeys, loadKeys } from './keys'
import { DEFAULT_TENANT, checkPrincipal } from './principal'
import { type AuthFailure, type AuthResult, type Authenticator, isFailure } from './stage'
import { TokenCache } from './token-cache'

// RFC 6750 §2.1: the scheme is case-insensitive (RFC 9110 §11.1); b64token is the token's alphabet.
const BEARER = /^bearer +([A-Za-z0-9\-._~+/]+=*) *$/i
/** b64token without its `=` padding: every token that can be cached (a padded one is refused as not canonical). */
const UNPADDED_B64TOKEN = /^[A-Za-z0-9\-._~+/]+$/
/**
 * The one spelling of the header a token is cached under: what clients send (the MCP SDK, fetch-based
 * clients), so their requests hit the cache on the header value alone, before any parsing.
 */
const CANONICAL_SCHEME = 'Bearer '

const MISSING: AuthFailure = { failed: true, reason: 'missing bearer token', bearerError: null, code: 'auth.missing_token' }
const NOT_BEARER: AuthFailure = { failed: true, reason: 'Authorization header is not a Bearer token', bearerError: null }
// The Bearer scheme with no well-formed token after it: a malformed request (RFC 6750 §3.1 invalid_request).
const MALFORMED_HEADER: AuthFailure = { failed: true, reason: 'malformed Authorization header', bearerError: 'invalid_request' }
// Node keeps the first of two Authorization headers and drops the second; a proxy in front may keep
// the other one. Which caller is meant is ambiguous, so neither is.
const REPEATED_HEADER: AuthFailure = { failed: true, reason: 'more than one Authorization header', bearerError: 'invalid_request' }
/**
 * RFC 6750 §2.3 tokens in the query are not accepted (the MCP authorization spec forbids them), and
 * such a request is refused rather than forwarded: the query goes upstream and into access logs.
 */
const QUERY_TOKEN: AuthFailure = {
  failed: true,
  reason: 'access token in the URL query: send it in the Authorization header',
  bearerError: 'invalid_request',
}

// Refused before any verification (isNonCanonicalJws), so these spellings cost neither a signature check nor a cache slot.
const NOT_CANONICAL: AuthFailure = {
  failed: true,
  reason: 'malformed token',
  bearerError: 'invalid_token',
  detail: 'not canonical base64url: padding or non-zero pad bits (RFC 7515 §2)',
}

/**
 * `auth.mode: jwt`: the caller is whoever the bearer token says, once its signature, algorithm,
 * lifetime, issuer and audience check out. The token comes from the Authorization header only (never
 * the query string: URLs end up in logs). Verified tokens are cached until their `exp`.
 */
export class JwtAuthenticator implements Authenticator {
  private readonly options: JWTVerifyOptions

  private constructor(
    private readonly config: JwtConfig,
    private readonly keys: VerificationKeys,
    private readonly cache: TokenCache,
    private readonly now: () => number,
  ) {
    this.options = {
      // Never trust the alg header on its own: it is chosen by whoever made the token (RFC 8725 §3.1).
      algorithms: [...config.algorithms],
      issuer: config.issuer ?? undefined,
      audience: config.audience.length > 0 ? [...config.audience] : undefined,
      clockTolerance: config.clockToleranceSeconds,
    }
  }

  static async open(config: JwtConfig, log: Logger, now: () => number = Date.now): Promise<JwtAuthenticator> {
    const keys = await loadKeys(config, log)
    log.info('verifying bearer tokens', {
      keys: keys.description,
      issuer: config.issuer,
      audience: config.audience,
      cache_entries: config.cacheEntries,
    })
    // An identity provider's keys sign tokens for every application it serves: without an audience
    // (and an issuer, for a shared JWKS) this gateway accepts tokens minted for someone else.
    if (config.secret === null && (config.audience.length === 0 || config.issuer === null)) {
      log.warn(
        'auth.jwt has no audience or no issuer: any token these keys signed is accepted, including tokens issued for other applications; set both',
        {
          issuer: config.issuer,
          audience: config.audience,
        },
      )
    }
    return new JwtAuthenticator(config, keys, new TokenCache(config.cacheEntries, now), now)
  }

  authenticate(ex: Exchange): AuthResult | Promise<AuthResult> {
    // Every check of the request itself runs before the cache, so a hit skips none of them.
    const req = ex.req
    if (hasQueryToken(req.url)) return QUERY_TOKEN
    const header = req.headers.authorization
    if (header === undefined || header === '') return MISSING
    if (rawHeaderCount(req.rawHeaders, 'authorization') > 1) return REPEATED_HEADER
    // Keys are `Bearer <token>` for tokens verified in full (see verify), so a header equal to one is
    // exactly what BEARER would parse to that token: the hit needs no parsing. Any other spelling (the
    // scheme in another case, more spaces, two tokens, padding) misses here and takes the path below.
    const cached = this.cache.get(header)
    if (cached !== undefined) return cached
    const match = BEARER.exec(header)
    if (match === null) return /^bearer(\s|$)/i.test(header) ? MALFORMED_HEADER : NOT_BEARER
    return this.verify(match[1])
  }

  /**
   * The whole check for one token string, as if sent as `Authorization: Bearer <token>`, cache included
   * (also what the benchmark measures). Another spelling of the scheme finds its token's entry here,
   * under the canonical key: one entry per token, whatever spellings its caller sends.
   */
  verify(token: string): AuthResult | Promise<AuthResult> {
    const cached = this.cache.get(CANONICAL_SCHEME + token)
    if (cached !== undefined) return cached
    // Checked on a miss only (a cached token is canonical): the hot path pays nothing for it.
    if (isNonCanonicalJws(token)) return NOT_CANONICAL
    return this.verifyUncached(token)
  }

  async verifyUncached(token: string): Promise<AuthResult> {
    let payload: JWTPayload
    try {
      // A fresh options object per call: verifications run concurrently, and the clock is injectable.
      const options: JWTVerifyOptions = { ...this.options, currentDate: new Date(this.now()) }
      payload = (await jwtVerify(token, this.keys.key as Parameters<typeof jwtVerify>[1], options)).payload
    } catch (err) {
      return rejection(err, token)
    }
    const principal = this.principalOf(payload)
    // jose's decoder skips whitespace inside a segment, so verify() (not a request: BEARER admits no
    // space) can pass a token that is no b64token. Cached as `Bearer <token>`, it would be a header the
    // full path refuses; only a token that header parses back to is kept.
    if (!isFailure(principal) && UNPADDED_B64TOKEN.test(token)) this.cache.set(CANONICAL_SCHEME + token, principal, payload.exp)
    return principal
  }

  private principalOf(payload: JWTPayload): AuthResult {
    const identity = payload[this.config.identityClaim]
    if (identity === undefined || identity === null) return invalid(`token has no "${this.config.identityClaim}" claim`)
    if (typeof identity !== 'string') return invalid(`token claim "${this.config.identityClaim}" is not a string`)
    const tenantClaim = payload[this.config.tenantClaim]
    let tenant: string
    if (tenantClaim === undefined || tenantClaim === null) {
      if (this.config.requireTenant) return invalid(`token has no "${this.config.tenantClaim}" claim`)
      tenant = DEFAULT_TENANT
    } else if (typeof tenantClaim !== 'string') {
      return invalid(`token claim "${this.config.tenantClaim}" is not a string`)
    } else {
      tenant = tenantClaim
    }
    const problem = checkPrincipal('identity', identity) ?? checkPrincipal('tenant', tenant)
    if (problem !== null) return invalid(`token ${problem}`)
    // For revocation by token id and by issue time. jose has checked that `iat`, when present, is a
    // number; a `jti` that is not a string is no id a revocation can name, so the token has none.
    const tokenId = typeof payload.jti === 'string' ? payload.jti : null
    // jose checks `iat` only for being a number. One past the clock tolerance (or `1e400`, Infinity
    // once parsed) would stay after every issued-before time an operator can write (at most a minute
    // ahead): a leaked token no issued-before revocation reaches. Refused as `nbf` in the future is.
    const iat = payload.iat
    if (iat !== undefined && !(iat <= this.now() / 1000 + this.config.clockToleranceSeconds))
      return invalid('token issued in the future ("iat")')
    return Object.freeze({ identity, tenant, tokenId, issuedAt: iat ?? null })
  }

  close(): void {
    this.keys.close()
    this.cache.clear()
  }
}

/**
 * JWS compact serialization is base64url *without* padding (RFC 7515 §2), and a canonical encoder sets
 * the pad bits of a segment's last character to zero (RFC 4648 §3.5). jose's decoder (atob) accepts
 * both a trailing `=` and non-zero pad bits, so one signed token has up to 32 spellings (16 final
 * characters × padded or not) that all verify. Each would be a token-cache key of its own: a full
 * verification per request and a cache flushed of everyone else's tokens by one caller's copies. Only
 * the canonical spelling is accepted, so every cached string is the one encoding of what was verified.
 */
export function isNonCanonicalJws(token: string): boolean {
  const first = token.indexOf('.')
  const second = first < 0 ? -1 : token.indexOf('.', first + 1)
  // Not three segments: not a JWS at all, and jose refuses it before any signature check, naming why.
  if (second < 0 || token.includes('.', second + 1)) return false
  return (
    token.includes('=') ||
    !canonicalSegment(token, 0, first) ||
    !canonicalSegment(token, first + 1, second) ||
    !canonicalSegment(token, second + 1, token.length)
  )
}

const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/** The segment token[start, end): its length leaves no lone character, and its pad bits are zero. */
function canonicalSegment(token: string, start: number, end: number): boolean {
  const rest = (end - start) % 4
  if (rest === 0) return true
  if (rest === 1) return false
  const value = BASE64URL.indexOf(token[end - 1])
  // 2 characters carry 1 byte (4 pad bits), 3 carry 2 bytes (2 pad bits).
  return value >= 0 && (value & (rest === 2 ? 0x0f : 0x03)) === 0
}

/** Parsed, not searched: `access%5Ftoken` is `access_token` to the upstream's query parser too. */
function hasQueryToken(url: string | undefined): boolean {
  if (url === undefined) return false
  const q = url.indexOf('?')
  if (q < 0) return false
  // Form decoding (URL standard, application/x-www-form-urlencoded parsing) changes only `+` (to a
  // space) and `%XX`: without a `%`, a name decodes to `access_token` only if it is spelt so literally.
  if (!url.includes('%', q) && !url.includes('access_token', q)) return false
  return new URLSearchParams(url.slice(q + 1)).has('access_token')
}

function invalid(reason: string, detail?: string): AuthFailure {
  return detail === undefined
    ? { failed: true, reason, bearerError: 'invalid_token' }
    : { failed: true, reason, bearerError: 'invalid_token', detail }
}

/**
 * Names the check that failed, in words safe for the caller: never the token, never a claim value
 * (a forged token could carry anything). Operators get the underlying cause in the audit reason.
 */
function rejection(err: unknown, token: string): AuthFailure {
  if (err instanceof errors.JWTExpired) return invalid('token expired')
  if (err instanceof errors.JWTClaimValidationFailed) {
    switch (err.claim) {
      case 'nbf':
        return invalid('token not yet valid')
      case 'iss':
        return invalid('wrong token issuer')
      case 'aud':
        return invalid('wrong token audience')
      default:
        return invalid(`invalid "${safeName(err.claim)}" claim`)
    }
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) return invalid('bad token signature')
  if (err instanceof errors.JOSEAlgNotAllowed) {
    return algorithmOf(token) === 'none' ? invalid('unsigned token (alg "none") not accepted') : invalid('token algorithm not allowed')
  }
  if (err instanceof errors.JWKSNoMatchingKey) return invalid('no known signing key matches the token')
  if (err instanceof errors.JWKSMultipleMatchingKeys) return invalid('token matches several signing keys; it needs a kid')
  if (err instanceof WardlineError && err.code === 'WL_AUTH_KEYS_UNAVAILABLE') {
    return { ...invalid('signing keys unavailable', `${err.code}: ${err.message}`), code: 'auth.keys_unavailable' }
  }
  if (err instanceof errors.JOSENotSupported) return invalid('unsupported token type or algorithm')
  if (err instanceof errors.JOSEError) return invalid('malformed token', describeError(err))
  // jose's own checks cover the token; anything else is a failure of ours, reported but still a 401.
  return invalid('token could not be verified', describeError(err))
}

function algorithmOf(token: string): string | undefined {
  try {
    return decodeProtectedHeader(token).alg
  } catch {
    return undefined
  }
}

function safeName(claim: string): string {
  return /^[A-Za-z0-9_:.-]{1,64}$/.test(claim) ? claim : 'unknown'
}
