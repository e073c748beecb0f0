import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { exportSPKI, generateKeyPair, SignJWT } from 'jose'
import winston from 'winston'
import { JwtAuthenticator } from '../../src/auth/jwt-authenticator'
import { DEVELOPMENT_SECRET } from '../../src/auth/keys'
import type { AuthResult } from '../../src/auth/stage'
import type { JwtConfig } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import { configFrom, tempDir } from '../helpers/harness'
import { SECRET, hour, hs, rsaKey, signWith, unsigned } from './forge'
import { authenticatorContract } from './authenticator-contract'

function jwtConfig(jwt: Record<string, unknown>, baseDir?: string): JwtConfig {
  const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt } }, {}, baseDir)
  if (config.auth.mode !== 'jwt') throw new Error('expected jwt mode')
  return config.auth.jwt
}

const open = (jwt: Record<string, unknown>, now?: () => number): Promise<JwtAuthenticator> =>
  JwtAuthenticator.open(jwtConfig(jwt), silentLogger(), now)

/** The reason a result was refused for, or the principal. */
function outcome(result: AuthResult): unknown {
  return 'failed' in result ? { reason: result.reason, bearerError: result.bearerError } : result
}

const rejected = (reason: string): unknown => ({ reason, bearerError: 'invalid_token' })

describe('JWT verification with an HS secret', () => {
  let auth: JwtAuthenticator
  beforeAll(async () => {
    auth = await open({ secret: SECRET, issuer: 'https://idp.example', audience: ['wardline', 'other'] })
  })
  afterAll(() => auth.close())
  const good = { sub: 'alice', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline' }

  test('a token signed with the secret gives its identity and tenant', async () => {
    expect(outcome(await auth.verify(await hs({ ...good, exp: hour() })))).toEqual({
      identity: 'alice',
      tenant: 'acme',
      tokenId: null,
      issuedAt: null,
    })
  })

  test('any one of the configured audiences is accepted', async () => {
    expect(outcome(await auth.verify(await hs({ ...good, aud: ['x', 'other'], exp: hour() })))).toEqual({
      identity: 'alice',
      tenant: 'acme',
      tokenId: null,
      issuedAt: null,
    })
  })

  test('each failed check is named, and the token itself never appears in the reason', async () => {
    const now = Math.floor(Date.now() / 1000)
    const cases: Array<[string, string]> = [
      [await hs({ ...good, exp: hour() }, 'another-secret-that-is-long-enough-0123456'), 'bad token signature'],
      [unsigned({ ...good, exp: hour() }), 'unsigned token (alg "none") not accepted'],
      [await hs({ ...good, exp: hour() }, SECRET, 'HS512'), 'token algorithm not allowed'],
      [await signWith(await rsaKey('k1'), { ...good, exp: hour() }), 'token algorithm not allowed'],
      [await hs({ ...good, exp: now - 120 }), 'token expired'],
      [await hs({ ...good, nbf: now + 120, exp: hour() }), 'token not yet valid'],
      [await hs({ ...good, iss: 'https://evil.example', exp: hour() }), 'wrong token issuer'],
      [await hs({ ...good, aud: 'someone-else', exp: hour() }), 'wrong token audience'],
      [await hs({ ...good, sub: undefined, exp: hour() }), 'token has no "sub" claim'],
      [await hs({ ...good, sub: 42 as unknown as string, exp: hour() }), 'token claim "sub" is not a string'],
      [await hs({ ...good, tenant: ['acme'], exp: hour() }), 'token claim "tenant" is not a string'],
      [await hs({ ...good, sub: 'alice\nbob', exp: hour() }), 'token identity contains control characters'],
      [await hs({ ...good, sub: 'a'.repeat(257), exp: hour() }), 'token identity is longer than 256 bytes'],
      [await hs({ ...good, tenant: '', exp: hour() }), 'token tenant is empty'],
      [await hs({ ...good, exp: 'soon' as unknown as number }), 'invalid "exp" claim'],
      ['not-a-jwt', 'malformed token'],
      ['a.b.c', 'malformed token'],
    ]
    for (const [token, reason] of cases) {
      const result = await auth.verify(token)
      expect(outcome(result)).toEqual(rejected(reason))
      expect(JSON.stringify(result)).not.toContain(token)
    }
  })

  test('expiry and nbf allow the configured clock tolerance (30 s by default)', async () => {
    const now = Math.floor(Date.now() / 1000)
    expect(outcome(await auth.verify(await hs({ ...good, exp: now - 10 })))).toEqual({
      identity: 'alice',
      tenant: 'acme',
      tokenId: null,
      issuedAt: null,
    })
    expect(outcome(await auth.verify(await hs({ ...good, nbf: now + 10, exp: hour() })))).toEqual({
      identity: 'alice',
      tenant: 'acme',
      tokenId: null,
      issuedAt: null,
    })
  })

  test('identities and tenants are opaque: Unicode is fine', async () => {
    const token = await hs({ ...good, sub: 'zoë@例え.jp', tenant: 'Ācme ☃', exp: hour() })
    expect(outcome(await auth.verify(token))).toEqual({ identity: 'zoë@例え.jp', tenant: 'Ācme ☃', tokenId: null, issuedAt: null })
  })
})

describe('JWT claims configuration', () => {
  test('a token without the tenant claim gets tenant "default", or a 401 when require_tenant is set', async () => {
    const lenient = await open({ secret: SECRET })
    const strict = await open({ secret: SECRET, require_tenant: true })
    const token = await hs({ sub: 'alice', exp: hour() })
    expect(outcome(await lenient.verify(token))).toEqual({ identity: 'alice', tenant: 'default', tokenId: null, issuedAt: null })
    expect(outcome(await strict.verify(token))).toEqual(rejected('token has no "tenant" claim'))
  })

  test('identity_claim and tenant_claim name other claims', async () => {
    const auth = await open({ secret: SECRET, identity_claim: 'email', tenant_claim: 'org' })
    const token = await hs({ sub: 'ignored', email: 'alice@acme.example', org: 'acme', exp: hour() })
    expect(outcome(await auth.verify(token))).toEqual({ identity: 'alice@acme.example', tenant: 'acme', tokenId: null, issuedAt: null })
  })

  test('several HS algorithms can be allowed at once', async () => {
    const auth = await open({ secret: SECRET, algorithms: ['HS256', 'HS512'] })
    expect(outcome(await auth.verify(await hs({ sub: 'a', exp: hour() }, SECRET, 'HS512')))).toEqual({
      identity: 'a',
      tenant: 'default',
      tokenId: null,
      issuedAt: null,
    })
    expect(outcome(await auth.verify(await hs({ sub: 'a', exp: hour() }, SECRET, 'HS384')))).toEqual(
      rejected('token algorithm not allowed'),
    )
  })
})

describe('verified-token cache in the authenticator', () => {
  test('a reused token is answered from the cache, and not past its exp even within the clock tolerance', async () => {
    let now = Date.now()
    const auth = await open({ secret: SECRET }, () => now)
    const exp = Math.floor(now / 1000) + 60
    const token = await hs({ sub: 'alice', tenant: 'acme', exp })
    const first = await auth.verify(token)
    expect(auth.verify(token)).toBe(first) // synchronous hit: same verified principal, no crypto
    now = exp * 1000 + 1_000 // past exp, inside the 30 s tolerance: the cache lets go, jose decides again
    const again = await auth.verify(token)
    expect(again).not.toBe(first)
    expect(outcome(again)).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
    now = exp * 1000 + 31_000
    expect(outcome(await auth.verify(token))).toEqual(rejected('token expired'))
  })

  test('cache_entries: 0 verifies every time', async () => {
    const auth = await open({ secret: SECRET, cache_entries: 0 })
    const token = await hs({ sub: 'alice', exp: hour() })
    const first = await auth.verify(token)
    expect(await auth.verify(token)).not.toBe(first)
    expect(outcome(await auth.verify(token))).toEqual(outcome(first))
  })
})

describe('JWT verification with a PEM public key', () => {
  test('RS256 tokens verify, and HS256 signed with the public key itself (alg confusion) is refused', async () => {
    const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true })
    const pem = await exportSPKI(publicKey)
    const dir = tempDir()
    writeFileSync(join(dir, 'public.pem'), pem)
    const auth = await JwtAuthenticator.open(jwtConfig({ public_key_file: 'public.pem', algorithms: ['RS256'] }, dir), silentLogger())
    const claims = { sub: 'alice', tenant: 'acme', exp: hour() }
    const good = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256' }).sign(privateKey)
    expect(outcome(await auth.verify(good))).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
    const confused = await hs(claims, pem, 'HS256')
    expect(outcome(await auth.verify(confused))).toEqual(rejected('token algorithm not allowed'))
  })

  test('a key file that cannot serve a configured algorithm stops startup with the key path', async () => {
    const { publicKey } = await generateKeyPair('RS256', { extractable: true })
    const dir = tempDir()
    writeFileSync(join(dir, 'public.pem'), await exportSPKI(publicKey))
    await expect(
      JwtAuthenticator.open(jwtConfig({ public_key_file: 'public.pem', algorithms: ['ES256'] }, dir), silentLogger()),
    ).rejects.toThrow(/auth\.jwt\.public_key_file: .*public\.pem is not a public key usable with ES256/)
    await expect(
      JwtAuthenticator.open(jwtConfig({ public_key_file: 'missing.pem', algorithms: ['RS256'] }, dir), silentLogger()),
    ).rejects.toThrow(/auth\.jwt\.public_key_file: .*missing\.pem cannot be read \(ENOENT\)/)
  })
})

function warnings(): { lines: string[]; log: winston.Logger } {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk))
      done()
    },
  })
  return {
    lines,
    log: winston.createLogger({
      level: 'warn',
      format: winston.format.json(),
      transports: [new winston.transports.Stream({ stream: sink })],
    }),
  }
}

test('asymmetric keys without an audience or an issuer start with a warning that foreign tokens are accepted', async () => {
  const dir = tempDir()
  const { publicKey } = await generateKeyPair('RS256')
  writeFileSync(join(dir, 'public.pem'), await exportSPKI(publicKey))
  const { lines, log } = warnings()
  const both = { public_key_file: 'public.pem', algorithms: ['RS256'], issuer: 'https://idp.example', audience: 'wardline' }
  ;(await JwtAuthenticator.open(jwtConfig(both, dir), log)).close()
  expect(lines).toEqual([])
  for (const jwt of [
    { ...both, audience: undefined },
    { ...both, issuer: undefined },
  ]) {
    ;(await JwtAuthenticator.open(jwtConfig(jwt, dir), log)).close()
    expect(lines).toHaveLength(1)
    expect(JSON.parse(lines.pop() as string)).toMatchObject({
      level: 'warn',
      message: expect.stringContaining('tokens issued for other applications') as unknown,
    })
  }
})

describe('the development secret', () => {
  test('starting with the documented development secret logs a warning; another secret does not', async () => {
    const { lines, log } = warnings()
    await JwtAuthenticator.open(jwtConfig({ secret: SECRET }), log)
    expect(lines).toEqual([])
    await JwtAuthenticator.open(jwtConfig({ secret: DEVELOPMENT_SECRET }), log)
    expect(lines).toHaveLength(1)
    expect(JSON.parse(lines[0])).toMatchObject({ level: 'warn', message: expect.stringContaining('public development secret') as unknown })
    expect(lines[0]).not.toContain(DEVELOPMENT_SECRET)
  })
})

authenticatorContract('JwtAuthenticator (HS256 secret)', async () => {
  const claims = { iss: 'https://idp.example', aud: 'wardline' }
  const jwt = { secret: SECRET, issuer: claims.iss, audience: claims.aud }
  const authenticator = await open(jwt)
  const token = (identity: string, tenant?: string): Promise<string> =>
    hs(tenant === undefined ? { ...claims, sub: identity, exp: hour() } : { ...claims, sub: identity, tenant, exp: hour() })
  const valid = await token('alice', 'acme')
  return {
    authenticator,
    config: configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt } }).auth,
    // A JSON claim carries any string, a NUL or a lone surrogate included: never null.
    credential: async (identity, tenant) => [['Authorization', `Bearer ${await token(identity, tenant)}`]],
    twoCallers: async (first, second) => [
      ['Authorization', `Bearer ${await token(first.identity, first.tenant)}`],
      ['Authorization', `Bearer ${await token(second.identity, second.tenant)}`],
    ],
    invalid: async () => [
      {
        label: 'another secret',
        headers: [['Authorization', `Bearer ${await hs({ ...claims, sub: 'alice', exp: hour() }, 'x'.repeat(44))}`]],
      },
      { label: 'expired', headers: [['Authorization', `Bearer ${await hs({ ...claims, sub: 'alice', exp: hour() - 7200 })}`]] },
      { label: 'unsigned', headers: [['Authorization', `Bearer ${unsigned({ ...claims, sub: 'alice', exp: hour() })}`]] },
      {
        label: 'wrong audience',
        headers: [['Authorization', `Bearer ${await hs({ ...claims, aud: 'other', sub: 'alice', exp: hour() })}`]],
      },
      {
        label: 'wrong issuer',
        headers: [['Authorization', `Bearer ${await hs({ ...claims, iss: 'https://evil', sub: 'alice', exp: hour() })}`]],
      },
      { label: 'no identity claim', headers: [['Authorization', `Bearer ${await hs({ ...claims, exp: hour() })}`]] },
      { label: 'not a JWT', headers: [['Authorization', 'Bearer not-a-jwt']] },
      { label: 'a padded spelling of a valid token', headers: [['Authorization', `Bearer ${valid}=`]] },
      { label: 'Basic credentials', headers: [['Authorization', 'Basic YWxpY2U6c2VjcmV0']] },
      { label: 'the scheme alone', headers: [['Authorization', 'Bearer']] },
      { label: 'two tokens in one header', headers: [['Authorization', `Bearer ${valid} ${valid}`]] },
      {
        label: 'a valid token, and one in the query too',
        headers: [['Authorization', `Bearer ${valid}`]],
        path: `/mcp?access_token=${valid}`,
      },
    ],
    close: () => authenticator.close(),
  }
})
