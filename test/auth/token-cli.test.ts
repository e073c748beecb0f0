/** `wardline token`: tokens the configured gateway accepts, for HS configs only. */
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { decodeJwt } from 'jose'
import { JwtAuthenticator } from '../../src/auth/jwt-authenticator'
import { DEVELOPMENT_SECRET, developmentSecretWarning, loadKeys } from '../../src/auth/keys'
import { mintToken, parseClaim, parseTtl } from '../../src/cli/token'
import { loadConfig } from '../../src/config/load'
import type { Config } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import { capturingLogger } from '../budget/budget-harness'
import { ROOT, cliMain } from '../helpers/cli'
import { configFrom, tempDir } from '../helpers/harness'
import { SECRET } from './forge'

async function accepted(config: Config, token: string): Promise<unknown> {
  if (config.auth.mode !== 'jwt') throw new Error('expected jwt mode')
  const auth = await JwtAuthenticator.open(config.auth.jwt, silentLogger())
  try {
    return await auth.verify(token)
  } finally {
    auth.close()
  }
}

describe('minting a token', () => {
  test('the token carries the configured issuer, audience and claim names, and the gateway accepts it', async () => {
    const config = configFrom({
      upstream: 'http://127.0.0.1:1',
      auth: {
        mode: 'jwt',
        jwt: {
          secret: SECRET,
          algorithms: ['HS384'],
          issuer: 'wardline-cli',
          audience: ['mcp', 'other'],
          identity_claim: 'email',
          tenant_claim: 'org',
        },
      },
    })
    const now = Date.now()
    const token = await mintToken(
      config,
      { sub: 'alice@acme.example', tenant: 'acme', ttlSeconds: 600, claims: { role: 'admin' } },
      () => now,
    )
    const claims = decodeJwt(token)
    expect(claims).toMatchObject({ email: 'alice@acme.example', org: 'acme', role: 'admin', iss: 'wardline-cli', aud: 'mcp' })
    expect((claims.exp as number) - (claims.iat as number)).toBe(600)
    expect(await accepted(config, token)).toEqual({
      identity: 'alice@acme.example',
      tenant: 'acme',
      tokenId: claims.jti,
      issuedAt: Math.floor(now / 1000),
    })
  })

  test('every token carries a jti of its own (128 random bits), so it can be revoked alone; a given tokenId is used as it is', async () => {
    const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt: { secret: SECRET } } })
    const ids = await Promise.all(
      Array.from({ length: 50 }, async () => decodeJwt(await mintToken(config, { sub: 'alice', ttlSeconds: 60 })).jti),
    )
    expect(new Set(ids).size).toBe(50)
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/)
    expect(decodeJwt(await mintToken(config, { sub: 'alice', ttlSeconds: 60, tokenId: 'mine' })).jti).toBe('mine')
  })

  test('--claim cannot set the identity, the tenant or the registered claims the command sets itself', async () => {
    const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt: { secret: SECRET } } })
    for (const claim of ['sub', 'tenant', 'exp', 'iss', 'jti']) {
      await expect(mintToken(config, { sub: 'alice', ttlSeconds: 60, claims: { [claim]: 'x' } })).rejects.toThrow(
        `--claim ${claim}: set by wardline token itself (use --sub, --tenant or --ttl)`,
      )
    }
  })

  test('asymmetric configs and header mode are refused with a message saying why', async () => {
    const jwks = configFrom({
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'jwt', jwt: { jwks_url: 'https://idp.example/jwks.json', algorithms: ['RS256'] } },
    })
    await expect(mintToken(jwks, { sub: 'alice', ttlSeconds: 60 })).rejects.toThrow(
      'this gateway verifies tokens with auth.jwt.jwks_url (asymmetric keys): only your identity provider holds the signing key, so get a token from it; wardline token works only with auth.jwt.secret',
    )
    const header = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'header' } })
    await expect(mintToken(header, { sub: 'alice', ttlSeconds: 60 })).rejects.toThrow(
      'auth.mode is header: this gateway reads X-Wardline-Identity and accepts no tokens',
    )
  })

  test('an identity or tenant the gateway would refuse, or a missing tenant it requires, is an error, not a useless token', async () => {
    const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt: { secret: SECRET } } })
    await expect(mintToken(config, { sub: '', ttlSeconds: 60 })).rejects.toThrow('--sub: identity is empty')
    await expect(mintToken(config, { sub: 'a\u0001b', ttlSeconds: 60 })).rejects.toThrow('--sub: identity contains control characters')
    await expect(mintToken(config, { sub: 'alice', tenant: '', ttlSeconds: 60 })).rejects.toThrow('--tenant: tenant is empty')
    const strict = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt: { secret: SECRET, require_tenant: true } } })
    await expect(mintToken(strict, { sub: 'alice', ttlSeconds: 60 })).rejects.toThrow(
      '--tenant is required: this gateway has auth.jwt.require_tenant: true',
    )
    expect(await accepted(strict, await mintToken(strict, { sub: 'alice', tenant: 'acme', ttlSeconds: 60 }))).toMatchObject({
      identity: 'alice',
      tenant: 'acme',
    })
  })

  test('--ttl takes s, m, h, d or bare seconds, between 1 s and 365 d', () => {
    expect(['90s', '30m', '1h', '7d', '45'].map(parseTtl)).toEqual([90, 1800, 3600, 604_800, 45])
    for (const bad of ['0', '1y', '-5', '366d', 'soon', '']) expect(() => parseTtl(bad)).toThrow(/must be like 90s, 30m, 1h or 7d/)
  })

  test('--claim k=v reads JSON values and keeps anything else as a string', () => {
    const claims = ['role=admin', 'level=3', 'beta=true', 'groups=["a","b"]', 'note=a=b'].reduce<Record<string, unknown>>(
      (acc, c) => parseClaim(c, acc),
      {},
    )
    expect(claims).toEqual({ role: 'admin', level: 3, beta: true, groups: ['a', 'b'], note: 'a=b' })
    expect(() => parseClaim('=x')).toThrow('--claim =x: must be key=value')
  })

  test('the command prints exactly one token line on stdout and its jti on stderr, signed for the file it was given', () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    writeFileSync(file, `upstream: http://127.0.0.1:3001\nauth:\n  jwt:\n    secret: ${SECRET}\n`)
    const r = wardline(['token', '--config', file, '--sub', 'alice', '--tenant', 'acme', '--ttl', '5m', '--claim', 'role=admin'])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/) // what $(wardline token …) captures
    const claims = decodeJwt(r.stdout.trim())
    expect(claims).toMatchObject({ sub: 'alice', tenant: 'acme', role: 'admin', jti: expect.any(String) as unknown })
    expect((claims.exp as number) - (claims.iat as number)).toBe(300)
    expect(r.stderr).toBe(`wardline: token jti ${claims.jti} (revoke this token alone: wardline revoke --jti ${claims.jti})\n`)
  })

  test('--json prints the token with its jti, identity, tenant and times as one JSON object, nothing on stderr', async () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    writeFileSync(file, `upstream: http://127.0.0.1:3001\nauth:\n  jwt:\n    secret: ${SECRET}\n`)
    const r = wardline(['token', '--config', file, '--sub', 'alice', '--json'])
    expect(r).toMatchObject({ status: 0, stderr: '' })
    const answer = JSON.parse(r.stdout) as Record<string, string>
    const claims = decodeJwt(answer.token)
    expect(answer).toEqual({
      token: expect.any(String) as unknown,
      jti: claims.jti,
      identity: 'alice',
      tenant: null,
      issued_at: new Date((claims.iat as number) * 1000).toISOString(),
      expires_at: new Date((claims.exp as number) * 1000).toISOString(),
    })
    expect(await accepted(loadConfig(file, {}), answer.token)).toMatchObject({ identity: 'alice', tenant: 'default', tokenId: claims.jti })
  })
})

/** `wardline <args>` as an operator's shell runs it, with exactly this environment (no WARDLINE_JWT_SECRET unless given). */
function wardline(args: string[], env: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const { WARDLINE_JWT_SECRET: _unset, ...rest } = process.env
  return spawnSync(process.execPath, [cliMain(), ...args], { cwd: ROOT, encoding: 'utf8', env: { ...rest, NO_COLOR: '1', ...env } })
}

describe('a token signed with the public development secret', () => {
  const file = resolve(__dirname, '../../wardline.yaml')

  test('wardline token warns on stderr with the sentence serve logs, when WARDLINE_JWT_SECRET is not set in its shell', async () => {
    // What serve logs at startup for this secret (the key loading both share).
    const { log, lines } = capturingLogger()
    const dev = loadConfig(file, {})
    if (dev.auth.mode !== 'jwt') throw new Error('expected jwt mode')
    const keys = await loadKeys(dev.auth.jwt, log)
    keys.close()
    const served = lines.find((l) => l.level === 'warn')?.message
    expect(served).toBe(developmentSecretWarning(DEVELOPMENT_SECRET))

    const r = wardline(['token', '--config', file, '--sub', 'alice', '--tenant', 'acme'])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/)
    const stderr = r.stderr.split('\n')
    expect(stderr[0]).toBe(`wardline: warning: ${served}`)
    expect(stderr[1]).toBe(
      'wardline: this token is signed with it: a gateway whose WARDLINE_JWT_SECRET is set refuses it (401 bad token signature)',
    )
    // And that is what happens: a gateway with its own secret refuses the token.
    const own = loadConfig(file, { WARDLINE_JWT_SECRET: SECRET })
    expect(await accepted(own, r.stdout.trim())).toEqual(expect.objectContaining({ reason: 'bad token signature' }))
  })

  test('with WARDLINE_JWT_SECRET set, or a secret of its own in the file, there is no warning', () => {
    const r = wardline(['token', '--config', file, '--sub', 'alice', '--tenant', 'acme'], { WARDLINE_JWT_SECRET: SECRET })
    expect(r.status).toBe(0)
    expect(r.stderr).not.toContain('warning')
    expect(r.stderr).toMatch(/^wardline: token jti \S+ /)
  })
})

describe('the default wardline.yaml', () => {
  const file = resolve(__dirname, '../../wardline.yaml')

  test('verifies JWTs with the documented development secret unless WARDLINE_JWT_SECRET is set', async () => {
    const dev = loadConfig(file, {})
    expect(dev.auth.mode).toBe('jwt')
    expect(dev.auth.mode === 'jwt' && dev.auth.jwt.secret).toBe(DEVELOPMENT_SECRET)
    const own = loadConfig(file, { WARDLINE_JWT_SECRET: SECRET })
    expect(own.auth.mode === 'jwt' && own.auth.jwt.secret).toBe(SECRET)
    const token = await mintToken(dev, { sub: 'alice', tenant: 'acme', ttlSeconds: 3600 })
    expect(await accepted(dev, token)).toMatchObject({ identity: 'alice', tenant: 'acme' })
    expect(await accepted(own, token)).toEqual(expect.objectContaining({ reason: 'bad token signature' }))
  })

  test('a WARDLINE_JWT_SECRET shorter than 32 bytes is a config error that does not show the secret', () => {
    expect(() => loadConfig(file, { WARDLINE_JWT_SECRET: 'short-secret' })).toThrow(
      /auth\.jwt\.secret: must be at least 32 bytes \(its value is not shown\)/,
    )
    try {
      loadConfig(file, { WARDLINE_JWT_SECRET: 'short-secret' })
    } catch (err) {
      expect(String((err as Error).message)).not.toContain('short-secret')
    }
  })
})
