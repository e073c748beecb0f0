import type { AuthConfig, JwtConfig, ResourceMetadata } from './types'
import { type Reader, join } from './reader'
import { readBlock, readKey } from './read-node'
import { AUTH, JWT } from './spec'

const HMAC_ALGORITHMS = ['HS256', 'HS384', 'HS512']
const ASYMMETRIC_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']
/** The keys that each give the verification key: a JWT block names exactly one (a cross-field rule, so code). */
const KEY_SOURCES = ['secret', 'jwks_url', 'jwks_file', 'public_key_file'] as const satisfies ReadonlyArray<keyof typeof JWT.properties>

/**
 * HS secrets shorter than the hash output make brute force practical (RFC 7518 §3.2). 32 bytes is
 * HS256's output; HS384 and HS512 should have 48 and 64 (docs/auth.md says so), but only the HS256
 * floor is enforced, for every algorithm.
 */
const MIN_SECRET_BYTES = 32

/** The `auth:` block at `path`. */
export function readAuth(r: Reader, value: unknown, resolvePath: (p: string) => string, path = 'auth'): AuthConfig {
  const o = readBlock(r, AUTH, value, path)
  const at = (key: string): string => join(path, key)
  const mode = readKey(r, AUTH, o, 'mode', path)
  const given = readKey(r, AUTH, o, 'resource_metadata_url', path) as string | null
  // Serialized by the URL parser (a `"` or a space in the path is percent-encoded), then held to
  // printable ASCII without `"` and `\`: it goes into a quoted string in WWW-Authenticate.
  const resourceMetadataUrl = given === null ? null : (checkUrl(r, given, at('resource_metadata_url'), ['http:', 'https:'])?.href ?? given)
  if (resourceMetadataUrl !== null && /["\\]|[^\x21-\x7e]/.test(resourceMetadataUrl)) {
    r.note(at('resource_metadata_url'), 'must not contain " or \\ or characters outside printable ASCII (percent-encode them)')
  }
  const resourceMetadata = readResourceMetadata(r, o.resource_metadata, at('resource_metadata'))
  if (mode === 'header') {
    if (o.jwt !== undefined) r.note(at('jwt'), 'is only used with auth.mode: jwt')
    return { mode, resourceMetadataUrl, resourceMetadata }
  }
  return { mode, resourceMetadataUrl, resourceMetadata, jwt: readJwt(r, o.jwt, resolvePath, at('jwt')) }
}

function readJwt(r: Reader, value: unknown, resolvePath: (p: string) => string, path: string): JwtConfig {
  const o = readBlock(r, JWT, value, path)
  const at = (key: string): string => join(path, key)
  const text = (key: 'secret' | 'jwks_url' | 'jwks_file' | 'public_key_file' | 'issuer'): string | null => readKey(r, JWT, o, key, path)
  const secret = text('secret')
  if (secret !== null && Buffer.byteLength(secret) < MIN_SECRET_BYTES) {
    r.note(at('secret'), `must be at least ${MIN_SECRET_BYTES} bytes (its value is not shown)`)
  }
  const jwksUrl = text('jwks_url')
  if (jwksUrl !== null) checkUrl(r, jwksUrl, at('jwks_url'), ['http:', 'https:'])
  const jwksFile = text('jwks_file')
  const publicKeyFile = text('public_key_file')
  const sources = KEY_SOURCES.filter((k) => o[k] !== undefined && o[k] !== null)
  if (sources.length !== 1) {
    r.note(path, `needs exactly one key source among ${KEY_SOURCES.join(', ')}${sources.length ? ` (found ${sources.join(', ')})` : ''}`)
  }

  const audience = readKey(r, JWT, o, 'audience', path) as string[]
  const algorithms = readKey(r, JWT, o, 'algorithms', path) as string[]
  // Chosen by which key source is configured, even when its value failed to read.
  const allowed = o.secret !== undefined && o.secret !== null ? HMAC_ALGORITHMS : ASYMMETRIC_ALGORITHMS
  algorithms.forEach((alg, i) => {
    if (!allowed.includes(alg)) r.note(join(at('algorithms'), i), `must be one of ${allowed.join(', ')} for this key source`)
  })
  if (sources.length === 1 && sources[0] !== 'secret' && algorithms.length === 0) {
    // The alg header is attacker-controlled: with asymmetric keys the operator names the algorithms.
    r.note(at('algorithms'), 'is required with jwks_url, jwks_file or public_key_file')
  }

  return {
    secret,
    jwksUrl,
    jwksFile: jwksFile === null ? null : resolvePath(jwksFile),
    publicKeyFile: publicKeyFile === null ? null : resolvePath(publicKeyFile),
    issuer: text('issuer'),
    audience,
    algorithms: algorithms.length > 0 ? algorithms : secret !== null ? ['HS256'] : [],
    identityClaim: readKey(r, JWT, o, 'identity_claim', path),
    tenantClaim: readKey(r, JWT, o, 'tenant_claim', path),
    requireTenant: readKey(r, JWT, o, 'require_tenant', path),
    clockToleranceSeconds: readKey(r, JWT, o, 'clock_tolerance_seconds', path),
    jwksTimeoutSeconds: readKey(r, JWT, o, 'jwks_timeout_seconds', path),
    jwksCacheSeconds: readKey(r, JWT, o, 'jwks_cache_seconds', path),
    jwksCooldownSeconds: readKey(r, JWT, o, 'jwks_cooldown_seconds', path),
    cacheEntries: readKey(r, JWT, o, 'cache_entries', path),
  }
}

function readResourceMetadata(r: Reader, value: unknown, path: string): ResourceMetadata | null {
  if (value === undefined || value === null) return null
  const node = AUTH.properties.resource_metadata
  const o = readBlock(r, node, value, path)
  const at = (key: string): string => join(path, key)
  const resource = readKey(r, node, o, 'resource', path)
  if (o.resource === undefined || o.resource === null) r.note(at('resource'), 'is required')
  else if (resource !== '') checkUrl(r, resource, at('resource'), ['http:', 'https:'])
  const authorizationServers = readKey(r, node, o, 'authorization_servers', path) as string[]
  authorizationServers.forEach((url, i) => checkUrl(r, url, join(at('authorization_servers'), i), ['http:', 'https:']))
  const scopesSupported = readKey(r, node, o, 'scopes_supported', path) as string[]
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
