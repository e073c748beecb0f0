import type { AuthConfig, JwtConfig, ResourceMetadata } from './types'
import { type Reader, join } from './reader'

const HMAC_ALGORITHMS = ['HS256', 'HS384', 'HS512']
const ASYMMETRIC_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']
const KEY_SOURCES = ['secret', 'jwks_url', 'jwks_file', 'public_key_file'] as const

/**
 * HS secrets shorter than the hash output make brute force practical (RFC 7518 §3.2). 32 bytes is
 * HS256's output; HS384 and HS512 should have 48 and 64 (docs/auth.md says so), but only the HS256
 * floor is enforced, for every algorithm.
 */
const MIN_SECRET_BYTES = 32

export function readAuth(r: Reader, value: unknown, resolvePath: (p: string) => string): AuthConfig {
  const o = r.object(value, 'auth', ['mode', 'jwt', 'resource_metadata_url', 'resource_metadata'])
  const mode = r.oneOf(o.mode, 'auth.mode', ['jwt', 'header'] as const, 'jwt')
  const given = r.optionalString(o.resource_metadata_url, 'auth.resource_metadata_url')
  // Serialized by the URL parser (a `"` or a space in the path is percent-encoded), then held to
  // printable ASCII without `"` and `\`: it goes into a quoted string in WWW-Authenticate.
  const resourceMetadataUrl = given === null ? null : (checkUrl(r, given, 'auth.resource_metadata_url', ['http:', 'https:'])?.href ?? given)
  if (resourceMetadataUrl !== null && /["\\]|[^\x21-\x7e]/.test(resourceMetadataUrl)) {
    r.note('auth.resource_metadata_url', 'must not contain " or \\ or characters outside printable ASCII (percent-encode them)')
  }
  const resourceMetadata = readResourceMetadata(r, o.resource_metadata)
  if (mode === 'header') {
    if (o.jwt !== undefined) r.note('auth.jwt', 'is only used with auth.mode: jwt')
    return { mode, resourceMetadataUrl, resourceMetadata }
  }
  return { mode, resourceMetadataUrl, resourceMetadata, jwt: readJwt(r, o.jwt, resolvePath) }
}

function readJwt(r: Reader, value: unknown, resolvePath: (p: string) => string): JwtConfig {
  const o = r.object(value, 'auth.jwt', [
    ...KEY_SOURCES,
    'issuer',
    'audience',
    'algorithms',
    'identity_claim',
    'tenant_claim',
    'require_tenant',
    'clock_tolerance_seconds',
    'jwks_timeout_seconds',
    'jwks_cache_seconds',
    'jwks_cooldown_seconds',
    'cache_entries',
  ])
  const secret = r.optionalString(o.secret, 'auth.jwt.secret')
  if (secret !== null && Buffer.byteLength(secret) < MIN_SECRET_BYTES) {
    r.note('auth.jwt.secret', `must be at least ${MIN_SECRET_BYTES} bytes (its value is not shown)`)
  }
  const jwksUrl = r.optionalString(o.jwks_url, 'auth.jwt.jwks_url')
  if (jwksUrl !== null) checkUrl(r, jwksUrl, 'auth.jwt.jwks_url', ['http:', 'https:'])
  const jwksFile = r.optionalString(o.jwks_file, 'auth.jwt.jwks_file')
  const publicKeyFile = r.optionalString(o.public_key_file, 'auth.jwt.public_key_file')
  const sources = KEY_SOURCES.filter((k) => o[k] !== undefined && o[k] !== null)
  if (sources.length !== 1) {
    r.note(
      'auth.jwt',
      `needs exactly one key source among ${KEY_SOURCES.join(', ')}${sources.length ? ` (found ${sources.join(', ')})` : ''}`,
    )
  }

  const audience = r.stringOrList(o.audience, 'auth.jwt.audience')
  const algorithms = r.stringOrList(o.algorithms, 'auth.jwt.algorithms')
  // Chosen by which key source is configured, even when its value failed to read.
  const allowed = o.secret !== undefined && o.secret !== null ? HMAC_ALGORITHMS : ASYMMETRIC_ALGORITHMS
  algorithms.forEach((alg, i) => {
    if (!allowed.includes(alg)) r.note(join('auth.jwt.algorithms', i), `must be one of ${allowed.join(', ')} for this key source`)
  })
  if (sources.length === 1 && sources[0] !== 'secret' && algorithms.length === 0) {
    // The alg header is attacker-controlled: with asymmetric keys the operator names the algorithms.
    r.note('auth.jwt.algorithms', 'is required with jwks_url, jwks_file or public_key_file')
  }

  return {
    secret,
    jwksUrl,
    jwksFile: jwksFile === null ? null : resolvePath(jwksFile),
    publicKeyFile: publicKeyFile === null ? null : resolvePath(publicKeyFile),
    issuer: r.optionalString(o.issuer, 'auth.jwt.issuer'),
    audience,
    algorithms: algorithms.length > 0 ? algorithms : secret !== null ? ['HS256'] : [],
    identityClaim: r.string(o.identity_claim, 'auth.jwt.identity_claim', 'sub', { nonEmpty: true }),
    tenantClaim: r.string(o.tenant_claim, 'auth.jwt.tenant_claim', 'tenant', { nonEmpty: true }),
    requireTenant: r.bool(o.require_tenant, 'auth.jwt.require_tenant', false),
    clockToleranceSeconds: r.int(o.clock_tolerance_seconds, 'auth.jwt.clock_tolerance_seconds', 30, 0, 3600),
    jwksTimeoutSeconds: r.number(o.jwks_timeout_seconds, 'auth.jwt.jwks_timeout_seconds', 5, 0, 60, true),
    jwksCacheSeconds: r.int(o.jwks_cache_seconds, 'auth.jwt.jwks_cache_seconds', 600, 1, 86_400),
    // A request may refetch the JWKS (an unknown kid, or no keys yet) only once the last attempt,
    // successful or not, is this old: made-up kids cannot turn into a flood of requests to the
    // identity provider, even while it fails (auth/keys.ts).
    jwksCooldownSeconds: r.int(o.jwks_cooldown_seconds, 'auth.jwt.jwks_cooldown_seconds', 30, 0, 3600),
    cacheEntries: r.int(o.cache_entries, 'auth.jwt.cache_entries', 10_000, 0, 1_000_000),
  }
}

function readResourceMetadata(r: Reader, value: unknown): ResourceMetadata | null {
  if (value === undefined || value === null) return null
  const o = r.object(value, 'auth.resource_metadata', ['resource', 'authorization_servers', 'scopes_supported'])
  const resource = r.string(o.resource, 'auth.resource_metadata.resource', '', { nonEmpty: true })
  if (o.resource === undefined || o.resource === null) r.note('auth.resource_metadata.resource', 'is required')
  else if (resource !== '') checkUrl(r, resource, 'auth.resource_metadata.resource', ['http:', 'https:'])
  const authorizationServers = r.stringOrList(o.authorization_servers, 'auth.resource_metadata.authorization_servers')
  authorizationServers.forEach((url, i) => checkUrl(r, url, join('auth.resource_metadata.authorization_servers', i), ['http:', 'https:']))
  const scopesSupported = r.stringOrList(o.scopes_supported, 'auth.resource_metadata.scopes_supported')
  return { resource, authorizationServers, scopesSupported }
}

/** Notes a value that is not an absolute URL with one of `protocols`; returns the parsed URL when it parses. */
export function checkUrl(r: Reader, value: string, path: string, protocols: readonly string[]): URL | null {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    r.note(path, 'must be an absolute URL')
    return null
  }
  if (!protocols.includes(url.protocol)) r.note(path, `must use ${protocols.map((p) => p.slice(0, -1)).join(' or ')}`)
  return url
}
