/**
 * The cache-hit path of JwtAuthenticator.authenticate: a request whose Authorization header is exactly
 * `Bearer <token>` for a token verified earlier is answered from the cache on the header value alone.
 * A hit must never skip a check a miss makes. Every case is a real HTTP request (raw bytes on a socket,
 * so repeated headers, odd spacing and case arrive as Node parses them), and jwtVerify is counted.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import * as jose from 'jose'
import { JwtAuthenticator } from '../../src/auth/jwt-authenticator'
import type { AuthResult } from '../../src/auth/stage'
import type { JwtConfig } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import { Exchange } from '../../src/pipeline/exchange'
import { configFrom } from '../helpers/harness'
import { SECRET, hs } from './forge'

jest.mock('jose', () => {
  const actual = jest.requireActual<typeof jose>('jose')
  return { ...actual, jwtVerify: jest.fn(actual.jwtVerify) }
})
const verifications = jose.jwtVerify as unknown as jest.Mock

const ISSUER = 'https://idp.example'
const GOOD = { sub: 'alice', tenant: 'acme', iss: ISSUER, aud: 'wardline' }

/** What authenticate() answered for one request, and whether it answered at once (a cache hit) or later. */
interface Seen {
  readonly result: AuthResult
  readonly synchronous: boolean
}

describe('the cache-hit path of jwt authentication', () => {
  let now = Date.now()
  let auth: JwtAuthenticator
  let small: JwtAuthenticator
  let server: Server
  let port: number
  let nextId = 0
  const seen = new Map<string, Seen>()

  const exp = (): number => Math.floor(now / 1000) + 600
  let tokens = 0
  /** A token of its own (jti) for each call: a token minted in the same second by another test is not cached yet. */
  const token = (claims: Record<string, unknown> = {}): Promise<string> => hs({ ...GOOD, exp: exp(), jti: String(++tokens), ...claims })

  beforeAll(async () => {
    const config = (entries: number): JwtConfig => {
      const jwt = { secret: SECRET, issuer: ISSUER, audience: 'wardline', cache_entries: entries }
      return (configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt } }).auth as { jwt: JwtConfig }).jwt
    }
    auth = await JwtAuthenticator.open(config(100), silentLogger(), () => now)
    small = await JwtAuthenticator.open(config(1), silentLogger(), () => now)
    server = createServer((req, res) => {
      void (async () => {
        const id = String(req.headers['x-case-id'])
        const authenticator = req.headers['x-cache'] === 'small' ? small : auth
        const answer = authenticator.authenticate(new Exchange(req, res, id, Date.now(), performance.now()))
        seen.set(id, { result: await answer, synchronous: !(answer instanceof Promise) })
        res.writeHead(204).end()
      })()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    port = (server.address() as AddressInfo).port
  })

  afterAll(async () => {
    auth.close()
    small.close()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })

  beforeEach(() => {
    now = Date.now()
    verifications.mockClear()
  })

  /** One request, its header lines sent byte for byte as given. */
  async function present(headers: ReadonlyArray<readonly [string, string]>, path = '/mcp'): Promise<Seen> {
    const id = String(++nextId)
    const lines = [`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1', `X-Case-Id: ${id}`, ...headers.map(([n, v]) => `${n}: ${v}`)]
    const request = `${lines.join('\r\n')}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.write(request))
      let text = ''
      socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
      socket.on('end', () => resolve(text))
      socket.on('error', reject)
    })
    const outcome = seen.get(id)
    if (outcome === undefined) throw new Error(`request ${id} never reached the authenticator: ${answer.split('\r\n')[0]}`)
    return outcome
  }

  const bearer = (value: string, extra: ReadonlyArray<readonly [string, string]> = []): Promise<Seen> =>
    present([['Authorization', value], ...extra])

  /** The principal, or the reason of the refusal. */
  const outcome = (s: Seen): unknown => ('failed' in s.result ? s.result.reason : s.result)

  test('the header a token was verified under is answered from the cache: at once, the same principal, no verification', async () => {
    const t = await token()
    const first = await bearer(`Bearer ${t}`)
    expect([outcome(first), first.synchronous]).toEqual([
      { identity: 'alice', tenant: 'acme', tokenId: expect.any(String) as unknown, issuedAt: null },
      false,
    ])
    for (let i = 0; i < 3; i++) {
      const hit = await bearer(`Bearer ${t}`)
      expect(hit.synchronous).toBe(true)
      expect(hit.result).toBe(first.result)
    }
    expect(verifications).toHaveBeenCalledTimes(1)
  })

  test('other spellings of the scheme find the same entry without a verification, and never make a second one', async () => {
    const t = await token({ sub: 'bob' })
    const spellings = [`bearer ${t}`, `BEARER ${t}`, `bEaReR ${t}`, `Bearer   ${t}`, `Bearer ${t}   `, `   Bearer ${t}`, `Bearer\t${t}`]
    // Bearer<TAB> is not the scheme and a space (BEARER wants spaces): a malformed header, as on a miss.
    const expected = (s: string): unknown =>
      s.startsWith('Bearer\t')
        ? 'malformed Authorization header'
        : { identity: 'bob', tenant: 'acme', tokenId: expect.any(String) as unknown, issuedAt: null }
    for (const spelling of spellings) expect(outcome(await bearer(spelling, [['X-Cache', 'small']]))).toEqual(expected(spelling))
    expect(verifications).toHaveBeenCalledTimes(1)
    // With room for one entry, a second entry per spelling would have evicted the first: the canonical header still hits.
    expect((await bearer(`Bearer ${t}`, [['X-Cache', 'small']])).synchronous).toBe(true)
    for (const spelling of spellings) expect(outcome(await bearer(spelling, [['X-Cache', 'small']]))).toEqual(expected(spelling))
    expect(verifications).toHaveBeenCalledTimes(1)
  })

  test('a token first sent in another spelling is cached under the canonical header, which then hits at once', async () => {
    const t = await token({ sub: 'carol' })
    expect((await bearer(`bearer   ${t}`)).synchronous).toBe(false)
    const hit = await bearer(`Bearer ${t}`)
    expect([outcome(hit), hit.synchronous]).toEqual([
      { identity: 'carol', tenant: 'acme', tokenId: expect.any(String) as unknown, issuedAt: null },
      true,
    ])
    expect(verifications).toHaveBeenCalledTimes(1)
  })

  test('past its exp a cached token is no hit in any spelling: jose judges it again, then refuses it past the tolerance', async () => {
    const expSeconds = exp()
    const t = await token({ exp: expSeconds })
    expect((await bearer(`Bearer ${t}`)).synchronous).toBe(false)
    expect((await bearer(`Bearer ${t}`)).synchronous).toBe(true)
    now = expSeconds * 1000 + 1_000 // inside the 30 s clock tolerance: jose still accepts it, the cache does not
    for (const spelling of [`bearer ${t}`, `Bearer ${t}`]) {
      const again = await bearer(spelling)
      expect([outcome(again), again.synchronous]).toEqual([
        { identity: 'alice', tenant: 'acme', tokenId: expect.any(String) as unknown, issuedAt: null },
        false,
      ])
    }
    expect(verifications).toHaveBeenCalledTimes(3)
    now = expSeconds * 1000 + 31_000
    for (const spelling of [`Bearer ${t}`, `bearer ${t}`]) expect(outcome(await bearer(spelling))).toBe('token expired')
  })

  test('a cached token in two Authorization headers is refused, whatever the case of their names', async () => {
    const t = await token()
    await bearer(`Bearer ${t}`)
    for (const [first, second] of [
      ['Authorization', 'Authorization'],
      ['authorization', 'AUTHORIZATION'],
      ['AuThOrIzAtIoN', 'authorization'],
    ]) {
      const twice = await present([
        [first, `Bearer ${t}`],
        [second, `Bearer ${t}`],
      ])
      expect(outcome(twice)).toBe('more than one Authorization header')
    }
    const other = await present([
      ['Authorization', `Bearer ${t}`],
      ['Authorization', 'Bearer somebody-else'],
    ])
    expect(outcome(other)).toBe('more than one Authorization header')
  })

  test('a cached token is refused when the URL query carries a token, in any encoding of the name', async () => {
    const t = await token()
    await bearer(`Bearer ${t}`)
    for (const path of [`/mcp?access_token=${t}`, `/mcp?x=1&access%5Ftoken=${t}`, `/mcp?%61ccess_token=x`, '/mcp??access_token=x']) {
      const refused = await present([['Authorization', `Bearer ${t}`]], path)
      expect([path, outcome(refused)]).toEqual([path, 'access token in the URL query: send it in the Authorization header'])
    }
    // A query without one is no reason to refuse: still a hit.
    for (const path of ['/mcp?x=1', '/mcp?access_tokens=1&%41=2', '/mcp?ACCESS_TOKEN=1']) {
      expect((await present([['Authorization', `Bearer ${t}`]], path)).synchronous).toBe(true)
    }
  })

  test('a header holding a cached token and something more is refused as a miss would refuse it', async () => {
    const t = await token()
    await bearer(`Bearer ${t}`)
    const cases: Array<[string, string]> = [
      [`Bearer ${t} ${t}`, 'malformed Authorization header'],
      [`Bearer ${t},Bearer ${t}`, 'malformed Authorization header'],
      [`Bearer ${t}, Bearer ${t}`, 'malformed Authorization header'],
      [`Bearer ${t}=`, 'malformed token'], // a padded spelling of the same token
      [`Bearer ${t.slice(0, -10)}${t.at(-10) === 'A' ? 'B' : 'A'}${t.slice(-9)}`, 'bad token signature'],
      [t, 'Authorization header is not a Bearer token'], // the token without its scheme
      [`Basic ${t}`, 'Authorization header is not a Bearer token'],
      [`Bearer${t}`, 'Authorization header is not a Bearer token'],
    ]
    for (const [header, reason] of cases) expect([header, outcome(await bearer(header))]).toEqual([header, reason])
    expect(verifications).toHaveBeenCalledTimes(2) // the first request, and the altered signature
    expect((await bearer(`Bearer ${t}`)).synchronous).toBe(true)
  })

  test('a failed verification caches nothing: the same header is verified, and refused, every time', async () => {
    const bad: Array<[string, string]> = [
      [await hs({ ...GOOD, exp: exp() }, 'another-secret-that-is-long-enough-0123456'), 'bad token signature'],
      [await token({ sub: ' admin' }), 'token identity has leading or trailing whitespace'],
      [await token({ aud: 'someone-else' }), 'wrong token audience'],
      [await token({ exp: Math.floor(now / 1000) - 120 }), 'token expired'],
    ]
    for (const [t, reason] of bad) {
      for (let i = 0; i < 3; i++) {
        const refused = await bearer(`Bearer ${t}`)
        expect([outcome(refused), refused.synchronous]).toEqual([reason, false])
      }
    }
    expect(verifications).toHaveBeenCalledTimes(3 * bad.length)
  })

  test('a valid token without exp is never cached', async () => {
    const t = await hs(GOOD)
    for (let i = 0; i < 2; i++) expect((await bearer(`Bearer ${t}`)).synchronous).toBe(false)
    expect(verifications).toHaveBeenCalledTimes(2)
  })

  test('a token verify() accepts with whitespace inside (jose skips it) is not cached as a header the full path refuses', async () => {
    const t = await token({ sub: 'dave' })
    const spaced = `${t.slice(0, -8)}    ${t.slice(-8)}` // four spaces keep the segment's length a multiple of 4
    expect(await auth.verify(spaced)).toEqual({ identity: 'dave', tenant: 'acme', tokenId: expect.any(String) as unknown, issuedAt: null })
    const sent = await bearer(`Bearer ${spaced}`)
    expect([outcome(sent), sent.synchronous]).toEqual(['malformed Authorization header', true])
  })
})
