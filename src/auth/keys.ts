import { readFileSync } from 'node:fs'
import {
  type CryptoKey,
  type JWK,
  type JWTHeaderParameters,
  type JWTVerifyGetKey,
  errors,
  createLocalJWKSet,
  createRemoteJWKSet,
  importSPKI,
  importX509,
} from 'jose'
import type { JwtConfig } from '../config/types'
import { WardlineError, describeError } from '../errors'
import { type Logger, RateLimitedLog } from '../log'

/**
 * The secret the default wardline.yaml falls back to when WARDLINE_JWT_SECRET is not set, so that
 * `npm start` works out of the box. It is public (it is in this file and in the docs): anyone can mint
 * tokens for a gateway that uses it, and startup says so.
 */
export const DEVELOPMENT_SECRET = 'wardline-development-secret-do-not-use-in-production'

/** What jwtVerify is given: one key (the common case, no lookup per token) or a lookup by header. */
export type VerificationKey = CryptoKey | JWTVerifyGetKey

export interface VerificationKeys {
  readonly key: VerificationKey
  /** For the startup log line: which source, never the secret. */
  readonly description: string
  close(): void
}

/**
 * Loads the configured key source once, before the first request: HS secrets and PEM keys are imported
 * as CryptoKeys (one per allowed algorithm, since a CryptoKey is bound to its algorithm), a JWKS file
 * is parsed, a JWKS URL is fetched once to warm it. A broken file or key is a config error here, not a
 * 401 on every request later.
 */
export async function loadKeys(config: JwtConfig, log: Logger): Promise<VerificationKeys> {
  if (config.secret !== null) return hmacKeys(config.secret, config.algorithms, log)
  if (config.publicKeyFile !== null) return publicKeys(config.publicKeyFile, config.algorithms)
  if (config.jwksFile !== null) return jwksFileKeys(config.jwksFile)
  if (config.jwksUrl !== null) return remoteKeys(config, log)
  throw new WardlineError('WL_CONFIG_INVALID', 'auth.jwt: no key source configured')
}

const HMAC_HASH: Readonly<Record<string, string>> = { HS256: 'SHA-256', HS384: 'SHA-384', HS512: 'SHA-512' }

/**
 * The warning for a gateway (startup) or a token (`wardline token`) whose secret is DEVELOPMENT_SECRET,
 * or null for any other secret: one sentence, so both say the same thing.
 */
export function developmentSecretWarning(secret: string): string | null {
  return secret === DEVELOPMENT_SECRET
    ? 'auth.jwt.secret is the public development secret: anyone can mint tokens for this gateway; set WARDLINE_JWT_SECRET before exposing it'
    : null
}

async function hmacKeys(secret: string, algorithms: readonly string[], log: Logger): Promise<VerificationKeys> {
  const warning = developmentSecretWarning(secret)
  if (warning !== null) log.warn(warning)
  const bytes = new TextEncoder().encode(secret)
  // A CryptoKey is verified about twice as fast as raw bytes, which jose would import on every call.
  const keys = new Map<string, CryptoKey>()
  for (const alg of algorithms) {
    keys.set(alg, await crypto.subtle.importKey('raw', bytes, { name: 'HMAC', hash: HMAC_HASH[alg] }, false, ['verify']))
  }
  return { key: byAlgorithm(keys), description: `HMAC secret (${algorithms.join(', ')})`, close: noop }
}

async function publicKeys(path: string, algorithms: readonly string[]): Promise<VerificationKeys> {
  const pem = readKeyFile(path, 'auth.jwt.public_key_file')
  const keys = new Map<string, CryptoKey>()
  for (const alg of algorithms) {
    try {
      keys.set(alg, pem.includes('-----BEGIN CERTIFICATE-----') ? await importX509(pem, alg) : await importSPKI(pem, alg))
    } catch (err) {
      throw new WardlineError(
        'WL_CONFIG_INVALID',
        `auth.jwt.public_key_file: ${path} is not a public key usable with ${alg} (${describeError(err)})`,
        { cause: err },
      )
    }
  }
  return { key: byAlgorithm(keys), description: `public key ${path} (${algorithms.join(', ')})`, close: noop }
}

function jwksFileKeys(path: string): VerificationKeys {
  const text = readKeyFile(path, 'auth.jwt.jwks_file')
  let jwks: { keys: JWK[] }
  try {
    jwks = JSON.parse(text) as { keys: JWK[] }
    const key = createLocalJWKSet(jwks)
    return { key, description: `JWKS file ${path} (${jwks.keys.length} keys)`, close: noop }
  } catch (err) {
    throw new WardlineError('WL_CONFIG_INVALID', `auth.jwt.jwks_file: ${path} is not a JSON Web Key Set (${describeError(err)})`, {
      cause: err,
    })
  }
}

/**
 * A remote JWKS, kept fresh in the background so that no request waits on the identity provider once
 * the keys are known. A token naming an unknown kid (a key rotation), or any token while no key was
 * ever fetched, triggers a fetch that the request waits for (never longer than the fetch timeout).
 * Fetches are spaced by the cooldown counted from the last attempt, successful or not: jose's own
 * cooldown starts only at a success, so while the provider fails, every made-up kid would fetch.
 * If a fetch fails, the keys already known stay in use.
 */
async function remoteKeys(config: JwtConfig, log: Logger): Promise<VerificationKeys> {
  const url = config.jwksUrl as string
  const timeoutMs = Math.ceil(config.jwksTimeoutSeconds * 1000)
  const cooldownMs = config.jwksCooldownSeconds * 1000
  // jose fetches (bounded, deduplicated, validated); when to fetch is decided here.
  const remote = createRemoteJWKSet(new URL(url), { timeoutDuration: timeoutMs, cacheMaxAge: Number.POSITIVE_INFINITY })
  let known: JWTVerifyGetKey | null = null
  let lastAttemptAt = Number.NEGATIVE_INFINITY
  let lastError: unknown = null
  let pending: Promise<void> | null = null
  const fetchKeys = (): Promise<void> => {
    pending ??= (async () => {
      lastAttemptAt = performance.now()
      try {
        await remote.reload()
        known = createLocalJWKSet(remote.jwks() as { keys: JWK[] })
        lastError = null
      } catch (err) {
        lastError = err
        throw err
      } finally {
        pending = null
      }
    })()
    return pending
  }
  const unavailable = (err: unknown): WardlineError =>
    new WardlineError('WL_AUTH_KEYS_UNAVAILABLE', `JWKS ${fetchProblem(err, config.jwksTimeoutSeconds)}`, { cause: err })

  const warnings = new RateLimitedLog(log)
  const refresh = (): Promise<void> =>
    fetchKeys().catch((err: unknown) => {
      warnings.warn('jwks', 'cannot refresh the JWKS; verifying with the keys already known', {
        jwks_url: url,
        error: fetchProblem(err, config.jwksTimeoutSeconds),
      })
    })
  await refresh()
  const timer = setInterval(() => void refresh(), config.jwksCacheSeconds * 1000)
  timer.unref()

  const key: JWTVerifyGetKey = async (header, token) => {
    let missing: errors.JWKSNoMatchingKey | null = null
    if (known !== null) {
      try {
        return await known(header, token)
      } catch (err) {
        if (!(err instanceof errors.JWKSNoMatchingKey)) throw err
        missing = err
      }
    }
    // Joining a fetch in flight costs the provider nothing; starting one waits for the cooldown.
    if (pending === null && performance.now() - lastAttemptAt < cooldownMs) {
      throw missing !== null && lastError === null ? missing : unavailable(lastError)
    }
    try {
      await fetchKeys()
    } catch (err) {
      throw unavailable(err)
    }
    return (known as JWTVerifyGetKey)(header, token)
  }
  return { key, description: `JWKS ${url}`, close: () => clearInterval(timer) }
}

function fetchProblem(err: unknown, timeoutSeconds: number): string {
  if (err instanceof errors.JWKSTimeout) return `fetch timed out after ${timeoutSeconds}s`
  // jose's own words: not a 200, not JSON, not a key set.
  if (err instanceof errors.JOSEError) return `fetch failed: ${err.message}`
  // fetch() says "fetch failed" with the socket error some causes down: describeError walks to it.
  return `fetch failed: ${describeError(err).replace(/^fetch failed: /, '')}`
}

function byAlgorithm(keys: Map<string, CryptoKey>): VerificationKey {
  // jose checks the alg header against `algorithms` before it asks for a key, so the lookup cannot miss.
  if (keys.size === 1) return keys.values().next().value as CryptoKey
  return (header: JWTHeaderParameters) => keys.get(header.alg) as CryptoKey
}

function readKeyFile(path: string, key: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch (err) {
    throw new WardlineError(
      'WL_CONFIG_INVALID',
      `${key}: ${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? describeError(err)})`,
      { cause: err },
    )
  }
}

function noop(): void {}
