/**
 * Identity exactness: the identity and tenant the gateway budgets, judges and audits
 * are exactly what the upstream reads from X-Wardline-Identity / X-Wardline-Tenant. A token with
 * `sub: " admin"` must not reach the upstream as `admin` (HTTP parsers trim header values).
 */
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import { JwtAuthenticator } from '../../src/auth/jwt-authenticator'
import { checkPrincipal } from '../../src/auth/principal'
import type { AuthResult } from '../../src/auth/stage'
import type { JwtConfig } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import { headerSafe } from '../../src/upstream/forward'
import { type Harness, MCP_HEADERS, configFrom, startHarness, toolCall } from '../helpers/harness'
import { SECRET, hour, hs } from './forge'

/** Every UTF-16 code unit that is not a surrogate half, as a one-character string. */
const BMP = Array.from({ length: 0x10000 }, (_, i) => String.fromCharCode(i)).filter((c) => !/[\ud800-\udfff]/.test(c))

describe('checkPrincipal: whitespace at either end', () => {
  test.each([
    ['U+0020 first', ' admin'],
    ['U+0020 last', 'admin '],
    ['U+00A0 first', '\u00a0admin'],
    ['U+3000 last', 'admin\u3000'],
    ['U+FEFF first', '\ufeffadmin'],
    ['U+2028 last', 'admin\u2028'],
    ['U+2009 first', '\u2009admin'],
    ['U+202F first', '\u202fadmin'],
    ['only U+0020', ' '],
  ])('%s is refused, and the reason says why', (_label, value) => {
    expect(checkPrincipal('identity', value)).toBe('identity has leading or trailing whitespace')
    expect(checkPrincipal('tenant', value)).toBe('tenant has leading or trailing whitespace')
  })

  test('whitespace inside a value is kept: "John Smith" is an identity', () => {
    expect(checkPrincipal('identity', 'John Smith')).toBeNull()
    expect(checkPrincipal('identity', 'a\u00a0b\u3000c')).toBeNull()
  })

  test('exactly what String.prototype.trim would remove is refused at either end, every BMP character checked', () => {
    const wrong: string[] = []
    for (const c of BMP) {
      const trimmed = `${c}x`.trim() !== `${c}x`
      // eslint-disable-next-line no-control-regex -- classifying C0/C1 control characters is the point
      const control = /[\u0000-\u001f\u007f-\u009f]/.test(c)
      for (const value of [`${c}x`, `x${c}`]) {
        const problem = checkPrincipal('identity', value)
        // Whitespace is refused (controls among it were already); anything else is accepted.
        if (trimmed ? problem === null : !control && problem !== null) wrong.push(`U+${c.charCodeAt(0).toString(16)}`)
      }
    }
    expect(wrong).toEqual([])
  })
})

describe('headerSafe over every accepted value', () => {
  /** Printable ASCII with no space at either end: what an HTTP parser hands over unchanged. */
  const TRANSPORTABLE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/

  // Deterministic pseudo-random values from a pool that leans on the awkward characters.
  const POOL = [
    '%',
    '%25',
    '%2',
    '%zz',
    ' ',
    '\u00a0',
    'a',
    'Z',
    '~',
    '"',
    ',',
    ';',
    'é',
    'ß',
    '\u3000',
    '日本',
    '😀',
    '\u200b',
    '+',
    '/',
    '=',
    '\\',
    '\u00ff',
    '\u0100',
  ]
  function* values(): Generator<string> {
    let seed = 42
    const next = (): number => (seed = (seed * 1103515245 + 12345) & 0x7fffffff)
    for (let i = 0; i < 5000; i++) {
      let v = ''
      const n = 1 + (next() % 8)
      for (let j = 0; j < n; j++) v += POOL[next() % POOL.length]
      yield v
    }
    yield* ['%', '%%', '%41', '100%', 'a%20b', 'caf%C3%A9', '%E0%A4%A', ...BMP.filter((c) => checkPrincipal('identity', c) === null)]
  }

  test('the upstream decodes every accepted value back exactly, and header transport cannot alter the encoded form', () => {
    let checked = 0
    const wrong: string[] = []
    for (const value of values()) {
      if (checkPrincipal('identity', value) !== null) continue
      const sent = headerSafe(value)
      if (!TRANSPORTABLE.test(sent) || decodeURIComponent(sent) !== value) wrong.push(value)
      checked++
    }
    expect(wrong).toEqual([])
    expect(checked).toBeGreaterThan(5000)
  })

  test('through a real HTTP hop, the header the upstream reads is the one sent', async () => {
    const received: string[] = []
    const server = createServer((req, res) => {
      received.push(req.headers['x-wardline-identity'] as string)
      res.end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as AddressInfo
    const samples = ['John Smith', '100%', 'caf%C3%A9', 'José', '日本 😀', 'a\u00a0b', '"quoted", ok']
    try {
      for (const value of samples) {
        await new Promise<void>((resolve, reject) => {
          const req = request({ port, host: '127.0.0.1', headers: { 'x-wardline-identity': headerSafe(value) } }, (res) =>
            res.resume().on('end', resolve),
          )
          req.on('error', reject)
          req.end()
        })
      }
    } finally {
      server.close()
    }
    expect(received.map(decodeURIComponent)).toEqual(samples)
  })
})

describe('jwt mode', () => {
  const jwt = { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' }
  const GOOD = { sub: 'alice', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline' }
  let auth: JwtAuthenticator
  beforeAll(async () => {
    const config = configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'jwt', jwt } })
    auth = await JwtAuthenticator.open((config.auth as { jwt: JwtConfig }).jwt, silentLogger())
  })
  afterAll(() => auth.close())

  const reason = (result: AuthResult): unknown => ('failed' in result ? result.reason : result)

  test('a token whose identity or tenant has whitespace at an end is refused, naming which claim', async () => {
    expect(reason(await auth.verify(await hs({ ...GOOD, sub: ' admin', exp: hour() })))).toBe(
      'token identity has leading or trailing whitespace',
    )
    expect(reason(await auth.verify(await hs({ ...GOOD, sub: 'admin\u00a0', exp: hour() })))).toBe(
      'token identity has leading or trailing whitespace',
    )
    expect(reason(await auth.verify(await hs({ ...GOOD, tenant: 'acme\u3000', exp: hour() })))).toBe(
      'token tenant has leading or trailing whitespace',
    )
    expect(reason(await auth.verify(await hs({ ...GOOD, sub: 'John Smith', exp: hour() })))).toEqual({
      identity: 'John Smith',
      tenant: 'acme',
      tokenId: null,
      issuedAt: null,
    })
  })

  describe('through the gateway', () => {
    let h: Harness
    beforeAll(async () => {
      h = await startHarness({ mode: 'stateless-json', config: { auth: { mode: 'jwt', jwt } } })
    })
    afterAll(() => h.close())

    test('sub " admin" gets a 401 naming the problem, an audit entry saying why, and nothing reaches the upstream', async () => {
      const token = await hs({ ...GOOD, sub: ' admin', exp: hour() })
      const before = h.upstream.seen.length
      const res = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` },
        body: JSON.stringify(toolCall('whoami')),
      })
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toContain(
        'error="invalid_token", error_description="token identity has leading or trailing whitespace"',
      )
      expect(await res.json()).toMatchObject({
        error: { code: 401, message: 'Unauthorized: token identity has leading or trailing whitespace' },
      })
      expect(h.upstream.seen.length).toBe(before)
      expect((await h.audit()).at(-1)).toMatchObject({
        decision: 'unauthorized',
        status: 401,
        identity: '',
        reason: 'token identity has leading or trailing whitespace',
      })
    })
  })
})

describe('header mode', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: { mode: 'header' } } })
  })
  afterAll(() => h.close())

  /** Raw bytes on a socket: the header value exactly as a proxy in front might send it. */
  function rawWhoami(identityBytes: Buffer): Promise<string> {
    const port = Number(new URL(h.url).port)
    const body = JSON.stringify(toolCall('whoami'))
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => {
        socket.write(
          `POST /mcp HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-wardline-identity: `,
        )
        socket.write(identityBytes)
        socket.write(`\r\nx-wardline-tenant: acme\r\n\r\n${body}`)
      })
      let data = ''
      socket.on('data', (c: Buffer) => (data += c.toString('utf8')))
      socket.on('end', () => resolve(data))
      socket.on('error', reject)
    })
  }

  test('SP and HTAB around the header value are gone before the gateway sees it: caller and upstream both see "admin"', async () => {
    const reply = await rawWhoami(Buffer.from(' \tadmin \t', 'latin1'))
    expect(reply).toMatch(/^HTTP\/1\.1 200 /)
    expect(reply).toContain('\\"identity\\":\\"admin\\"')
    expect((await h.audit()).at(-1)).toMatchObject({ identity: 'admin', decision: 'allow' })
  })

  test('a Unicode space at an end (raw UTF-8 from a proxy) survives the parser, so it is refused with 401', async () => {
    const before = h.upstream.seen.length
    const reply = await rawWhoami(Buffer.concat([Buffer.from([0xc2, 0xa0]), Buffer.from('admin')]))
    expect(reply).toMatch(/^HTTP\/1\.1 401 /)
    expect(h.upstream.seen.length).toBe(before)
    expect((await h.audit()).at(-1)).toMatchObject({ decision: 'unauthorized', reason: 'identity has leading or trailing whitespace' })
  })
})
