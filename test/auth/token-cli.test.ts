/** `wardline token`: tokens the configured gateway accepts, for HS configs only. */
import { writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { decodeJwt } from 'jose'
import { JwtAuthenticator } from '../../src/auth/jwt-authenticator'
import { DEVELOPMENT_SECRET } from '../../src/auth/keys'
import { mintToken, parseClaim, parseTtl, tokenCommand } from '../../src/cli/token'
import { loadConfig } from '../../src/config/load'
import type { Config } from '../../src/config/types'
import { silentLogger } from '../../src/log'
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
    expect(await accepted(config, token)).toEqual({ identity: 'alice@acme.example', tenant: 'acme' })
  })

  test('--claim cannot set the identity, the tenant or the registered claims the command sets itself', async () => {
    const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt: { secret: SECRET } } })
    for (const claim of ['sub', 'tenant', 'exp', 'iss']) {
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
    expect(await accepted(strict, await mintToken(strict, { sub: 'alice', tenant: 'acme', ttlSeconds: 60 }))).toEqual({
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

  test('the command prints exactly one token line, signed for the file it was given', async () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    writeFileSync(file, `upstream: http://127.0.0.1:3001\nauth:\n  jwt:\n    secret: ${SECRET}\n`)
    const out: string[] = []
    const spy = jest.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => (out.push(String(chunk)), true))
    try {
      await tokenCommand({ config: file, sub: 'alice', tenant: 'acme', ttl: '5m', claim: { role: 'admin' } })
    } finally {
      spy.mockRestore()
    }
    expect(out).toHaveLength(1)
    expect(out[0]).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/)
    const token = out[0].trim()
    expect(decodeJwt(token)).toMatchObject({ sub: 'alice', tenant: 'acme', role: 'admin' })
    expect(await accepted(loadConfig(file, {}), token)).toEqual({ identity: 'alice', tenant: 'acme' })
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
    expect(await accepted(dev, token)).toEqual({ identity: 'alice', tenant: 'acme' })
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
