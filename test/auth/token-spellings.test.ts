/**
 * One signed token, many spellings: jose decodes base64url with atob, which accepts a
 * trailing `=` and ignores the pad bits of a segment's last character, so each spelling verified and
 * was cached under its own key — a full verification per request for whoever varied them.
 */
import * as jose from 'jose'
import { JwtAuthenticator, isNonCanonicalJws } from '../../src/auth/jwt-authenticator'
import type { AuthResult } from '../../src/auth/stage'
import type { JwtConfig } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import { configFrom } from '../helpers/harness'
import { SECRET, hour, hs, rsaKey, signWith } from './forge'

// Counts signature verifications: the real jwtVerify, observed.
jest.mock('jose', () => {
  const actual = jest.requireActual<typeof jose>('jose')
  return { ...actual, jwtVerify: jest.fn(actual.jwtVerify) }
})
const verifications = jose.jwtVerify as unknown as jest.Mock

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/** Every other spelling of `token` that decodes to the same bytes: other pad bits, and `=` padding. */
function spellings(token: string): string[] {
  const sig = token.slice(token.lastIndexOf('.') + 1)
  const padBits = sig.length % 4 === 2 ? 0x0f : 0x03
  const last = ALPHABET.indexOf(sig.at(-1) as string)
  const bodies: string[] = []
  for (let bits = 0; bits <= padBits; bits++) bodies.push(token.slice(0, -1) + ALPHABET[last | bits])
  const padding = '='.repeat((4 - (sig.length % 4)) % 4)
  return [...bodies.slice(1), ...bodies.map((b) => b + padding)]
}

const GOOD = { sub: 'alice', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline' }

function reason(result: AuthResult): unknown {
  return 'failed' in result ? result.reason : result
}

describe('non-canonical spellings of a valid token', () => {
  let auth: JwtAuthenticator
  beforeAll(async () => {
    const config = configFrom({
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'jwt', jwt: { secret: SECRET, issuer: GOOD.iss, audience: GOOD.aud } },
    })
    auth = await JwtAuthenticator.open((config.auth as { jwt: JwtConfig }).jwt, silentLogger())
  })
  afterAll(() => auth.close())
  beforeEach(() => verifications.mockClear())

  test('jose itself accepts them all (why the gateway must not hand them over)', async () => {
    const token = await hs({ ...GOOD, exp: hour() })
    const variants = spellings(token)
    expect(variants.length).toBe(7) // HS256: 2 pad bits → 4 final characters, each with and without `=`
    const key = new TextEncoder().encode(SECRET)
    for (const v of variants) await expect(jose.jwtVerify(v, key)).resolves.toBeDefined()
  })

  test('N spellings of a token cost one verification in all: the canonical one is verified, every other is refused unverified', async () => {
    const token = await hs({ ...GOOD, exp: hour() })
    expect(reason(await auth.verify(token))).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
    for (let round = 0; round < 20; round++) {
      for (const v of spellings(token)) expect(reason(await auth.verify(v))).toBe('malformed token')
      expect(reason(await auth.verify(token))).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
    }
    expect(verifications).toHaveBeenCalledTimes(1)
  })

  test('an RS256 token (4 pad bits: 16 final characters) is held to the same rule', async () => {
    const token = await signWith(await rsaKey('k'), { ...GOOD, exp: hour() })
    expect(spellings(token).length).toBe(31)
    expect(spellings(token).every((v) => isNonCanonicalJws(v))).toBe(true)
    expect(isNonCanonicalJws(token)).toBe(false)
  })

  test('the refusal is a 401 invalid_token whose audit detail names the encoding', async () => {
    const token = await hs({ ...GOOD, exp: hour() })
    const result = await auth.verify(`${token}=`)
    expect(result).toMatchObject({ failed: true, reason: 'malformed token', bearerError: 'invalid_token' })
    expect((result as { detail?: string }).detail).toMatch(/canonical base64url/)
  })
})

describe('isNonCanonicalJws', () => {
  test.each([
    ['eyJh.eyJz.AAAA', false],
    ['eyJh.eyJz.AA', false], // 1 byte (0x00): the second character's 4 low bits are pad bits, all zero
    ['eyJh.eyJz.AQ', false], // 0x01
    ['eyJh.eyJz.AR', true], // non-zero pad bits
    ['eyJh.eyJz.AAE', false], // 2 bytes: 2 pad bits
    ['eyJh.eyJz.AAF', true],
    ['eyA.eyJz.AAAA', false], // every segment is held to the rule (a changed header or payload fails the signature anyway)
    ['eyB.eyJz.AAAA', true],
    ['eyJh.eyJz.A', true], // a lone character carries no byte
    ['eyJh.eyJz.AAAA=', true],
    ['eyJh.eyJz.', false], // empty signature (alg none): jose refuses it on its own
    ['garbage', false], // not three segments: not a JWS, jose says so
    ['a.b.c.d', false],
  ])('%s → %s', (token, nonCanonical) => {
    expect(isNonCanonicalJws(token)).toBe(nonCanonical)
  })
})
