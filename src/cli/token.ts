import { randomBytes } from 'node:crypto'
import { SignJWT } from 'jose'
import { loadConfigBlocks } from '../config/load'
import type { AuthConfig } from '../config/types'
import { developmentSecretWarning } from '../auth/keys'
import { checkPrincipal } from '../auth/principal'
import { WardlineError } from '../errors'
import { escapeJsonText } from '../escape'

export interface TokenRequest {
  /** The identity (goes into `auth.jwt.identity_claim`, `sub` by default). */
  readonly sub: string
  /** The tenant (goes into `auth.jwt.tenant_claim`); omitted means the gateway's `default` tenant. */
  readonly tenant?: string
  readonly ttlSeconds: number
  /** The `jti` claim, so the token can be revoked alone; a random one (randomTokenId) when absent. */
  readonly tokenId?: string
  /** Extra claims; they never override iss, aud, iat, exp, jti or the identity and tenant claims. */
  readonly claims?: Readonly<Record<string, unknown>>
}

const MAX_TTL_SECONDS = 365 * 86_400
const UNITS: Readonly<Record<string, number>> = { s: 1, m: 60, h: 3600, d: 86_400 }

/**
 * Signs a token the configured gateway accepts, with its HS secret. Only for symmetric configs: with
 * a JWKS or a public key, the signing key belongs to the identity provider and Wardline never holds it.
 */
export async function mintToken(
  config: { readonly auth: AuthConfig },
  request: TokenRequest,
  now: () => number = Date.now,
): Promise<string> {
  if (config.auth.mode !== 'jwt') {
    throw new WardlineError('WL_CONFIG_INVALID', 'auth.mode is header: this gateway reads X-Wardline-Identity and accepts no tokens')
  }
  const jwt = config.auth.jwt
  if (jwt.secret === null) {
    const source = jwt.jwksUrl !== null ? 'jwks_url' : jwt.jwksFile !== null ? 'jwks_file' : 'public_key_file'
    throw new WardlineError(
      'WL_CONFIG_INVALID',
      `this gateway verifies tokens with auth.jwt.${source} (asymmetric keys): only your identity provider holds the signing key, so get a token from it; wardline token works only with auth.jwt.secret`,
    )
  }
  for (const reserved of [jwt.identityClaim, jwt.tenantClaim, 'iss', 'aud', 'iat', 'exp', 'nbf', 'jti']) {
    if (request.claims !== undefined && Object.hasOwn(request.claims, reserved)) {
      throw new WardlineError('WL_CONFIG_INVALID', `--claim ${reserved}: set by wardline token itself (use --sub, --tenant or --ttl)`)
    }
  }
  // A token the gateway would refuse whatever happens is an error here, not a puzzle at the first request.
  const badSub = checkPrincipal('identity', request.sub)
  if (badSub !== null) throw new WardlineError('WL_CONFIG_INVALID', `--sub: ${badSub}`)
  const badTenant = request.tenant === undefined ? null : checkPrincipal('tenant', request.tenant)
  if (badTenant !== null) throw new WardlineError('WL_CONFIG_INVALID', `--tenant: ${badTenant}`)
  if (request.tenant === undefined && jwt.requireTenant) {
    throw new WardlineError(
      'WL_CONFIG_INVALID',
      '--tenant is required: this gateway has auth.jwt.require_tenant: true and refuses tokens without a tenant',
    )
  }
  const issuedAt = Math.floor(now() / 1000)
  const payload: Record<string, unknown> = { ...request.claims, [jwt.identityClaim]: request.sub }
  if (request.tenant !== undefined) payload[jwt.tenantClaim] = request.tenant
  const token = new SignJWT(payload)
    .setProtectedHeader({ alg: jwt.algorithms[0], typ: 'JWT' })
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + request.ttlSeconds)
    .setJti(request.tokenId ?? randomTokenId())
  if (jwt.issuer !== null) token.setIssuer(jwt.issuer)
  if (jwt.audience.length > 0) token.setAudience(jwt.audience[0])
  return token.sign(new TextEncoder().encode(jwt.secret))
}

/** 128 random bits, base64url: a `jti` nobody can guess or collide with (RFC 7519 §4.1.7). */
export function randomTokenId(): string {
  return randomBytes(16).toString('base64url')
}

/** `1h`, `30m`, `90s`, `7d` or a bare number of seconds. */
export function parseTtl(text: string): number {
  const match = /^(\d+)([smhd]?)$/.exec(text.trim())
  const seconds = match === null ? NaN : Number(match[1]) * UNITS[match[2] || 's']
  if (!(seconds >= 1 && seconds <= MAX_TTL_SECONDS)) {
    throw new WardlineError('WL_CONFIG_INVALID', `--ttl ${text}: must be like 90s, 30m, 1h or 7d, between 1s and 365d`)
  }
  return seconds
}

/** `k=v`: v is read as JSON when it parses (numbers, true, lists), otherwise kept as a string. */
export function parseClaim(text: string, into: Record<string, unknown> = {}): Record<string, unknown> {
  const eq = text.indexOf('=')
  if (eq <= 0) throw new WardlineError('WL_CONFIG_INVALID', `--claim ${text}: must be key=value`)
  const raw = text.slice(eq + 1)
  let value: unknown
  try {
    value = JSON.parse(raw)
  } catch {
    value = raw
  }
  into[text.slice(0, eq)] = value
  return into
}

export interface TokenOptions {
  readonly config: string
  readonly sub: string
  readonly tenant?: string
  readonly ttl: string
  readonly claim: Record<string, unknown>
  readonly json?: boolean
}

/**
 * `wardline token`: prints one token on stdout, nothing else, so `$(wardline token …)` works; its `jti`
 * (what `wardline revoke --jti` takes) goes to stderr, or with --json stdout is one JSON object with the
 * token, its jti and its times. Only the auth block is read: a shell that minted tokens need not set the
 * variables of postgres.dsn or admin.token. A token signed with the development secret gets the warning
 * `serve` logs for it: a gateway started where WARDLINE_JWT_SECRET is set refuses such a token
 * (`401 bad token signature`), and this shell may simply not have exported it.
 */
export async function tokenCommand(options: TokenOptions): Promise<void> {
  const config = loadConfigBlocks(options.config, ['auth'])
  const ttlSeconds = parseTtl(options.ttl)
  const tokenId = randomTokenId()
  const issuedAtMs = Date.now()
  const token = await mintToken(
    config,
    { sub: options.sub, tenant: options.tenant, ttlSeconds, tokenId, claims: options.claim },
    () => issuedAtMs,
  )
  const warning = config.auth.mode === 'jwt' && config.auth.jwt.secret !== null ? developmentSecretWarning(config.auth.jwt.secret) : null
  if (warning !== null) {
    process.stderr.write(
      `wardline: warning: ${warning}\nwardline: this token is signed with it: a gateway whose WARDLINE_JWT_SECRET is set refuses it (401 bad token signature)\n`,
    )
  }
  if (options.json === true) {
    const issuedAt = Math.floor(issuedAtMs / 1000)
    const answer = {
      token,
      jti: tokenId,
      identity: options.sub,
      tenant: options.tenant ?? null,
      issued_at: new Date(issuedAt * 1000).toISOString(),
      expires_at: new Date((issuedAt + ttlSeconds) * 1000).toISOString(),
    }
    process.stdout.write(`${escapeJsonText(JSON.stringify(answer))}\n`)
    return
  }
  process.stderr.write(`wardline: token jti ${tokenId} (revoke this token alone: wardline revoke --jti ${tokenId})\n`)
  process.stdout.write(`${token}\n`)
}
