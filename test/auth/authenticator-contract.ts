import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import { type AuthFailure, type AuthResult, type Authenticator, authStage } from '../../src/auth/stage'
import type { AuthConfig } from '../../src/config/types'
import { Exchange, type Principal } from '../../src/pipeline/exchange'
import { CONTINUE, type Refusal, type Verdict } from '../../src/pipeline/stage'

/** Request headers in the order sent. A string value goes out as its UTF-8 bytes (what a proxy sends), a Buffer as is. */
export type RawHeaders = ReadonlyArray<readonly [string, string | Buffer]>

/** A request that must not authenticate, and why (the label names the case in failures). */
export interface BadRequest {
  readonly label: string
  readonly headers: RawHeaders
  /** Request target; '/mcp' when absent. */
  readonly path?: string
}

/**
 * An authenticator under test with a way to present a credential for any caller: each implementation
 * mints its own kind (signed tokens, trusted headers) and lists the requests it must refuse.
 */
export interface AuthenticatorFixture {
  readonly authenticator: Authenticator
  /** The auth config the stage is built from (only its challenge settings matter here). */
  readonly config: AuthConfig
  /**
   * Headers carrying a valid credential for `identity` (and `tenant`; undefined: the credential names
   * no tenant), or null when this kind of credential cannot carry that value at all (HTTP cannot put
   * a NUL or a lone surrogate in a header, and trims spaces at either end).
   */
  credential(identity: string, tenant?: string): Promise<RawHeaders | null>
  /** One request presenting two credentials, for two different callers. */
  twoCallers(first: Principal, second: Principal): Promise<RawHeaders>
  /** Requests with a malformed or invalid credential of this kind. */
  invalid(): Promise<readonly BadRequest[]>
  close?(): Promise<void> | void
}

/** What the authenticator and the auth stage made of one real HTTP request. */
interface Outcome {
  readonly result?: AuthResult
  readonly threw?: unknown
  readonly verdict?: Verdict
  readonly stageThrew?: unknown
  /** ex.principal after the stage ran. */
  readonly principal: Principal | null
}

const BEARER_ERRORS = [null, 'invalid_token', 'invalid_request']

/** What an outsider may rely on about any identity or tenant an authenticator lets through. */
function expectValidPrincipalValue(value: unknown): void {
  expect(typeof value).toBe('string')
  const text = value as string
  expect(text.length).toBeGreaterThan(0)
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(256)
  // eslint-disable-next-line no-control-regex -- the assertion is that no C0/C1 control character gets through
  expect(text).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/)
  expect(text).toBe(text.trim())
  expect(text).not.toMatch(/[\ud800-\udfff]/u) // with the u flag only an unpaired surrogate half matches
}

/**
 * The Authenticator contract (src/auth/stage.ts), run by every implementation: a valid credential gives
 * exactly its caller; anything else is an AuthFailure (a value, never a throw) that the auth stage turns
 * into the documented 401; identity and tenant are judged by the same rules whatever carried them.
 * Every case is a real HTTP request to a node:http server on port 0, so headers arrive as Node parses them.
 */
export function authenticatorContract(label: string, open: () => Promise<AuthenticatorFixture>): void {
  describe(`Authenticator contract: ${label}`, () => {
    let fx: AuthenticatorFixture
    let server: Server
    let port: number
    let nextId = 0
    const outcomes = new Map<string, Outcome>()

    beforeAll(async () => {
      fx = await open()
      const stage = authStage(fx.authenticator, fx.config)
      server = createServer((req, res) => {
        void (async () => {
          const id = String(req.headers['x-contract-id'])
          let result: AuthResult | undefined
          let threw: unknown
          try {
            result = await fx.authenticator.authenticate(new Exchange(req, res, `contract-${id}`, Date.now(), performance.now()))
          } catch (err) {
            threw = err ?? new Error('threw a nullish value')
          }
          const ex = new Exchange(req, res, `contract-${id}`, Date.now(), performance.now())
          let verdict: Verdict | undefined
          let stageThrew: unknown
          try {
            verdict = await stage.run(ex)
          } catch (err) {
            stageThrew = err ?? new Error('threw a nullish value')
          }
          outcomes.set(id, { result, threw, verdict, stageThrew, principal: ex.principal })
          res.writeHead(204).end()
        })()
      })
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      port = (server.address() as AddressInfo).port
    })

    afterAll(async () => {
      await fx?.close?.()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    })

    /** Sends one request as raw bytes on its own connection; resolves with what the server made of it. */
    async function present(headers: RawHeaders, path = '/mcp'): Promise<Outcome> {
      const id = String(++nextId)
      const lines: Buffer[] = [Buffer.from(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Contract-Id: ${id}\r\n`, 'latin1')]
      for (const [name, value] of headers) {
        lines.push(Buffer.from(`${name}: `, 'latin1'), typeof value === 'string' ? Buffer.from(value, 'utf8') : value, Buffer.from('\r\n'))
      }
      lines.push(Buffer.from('Content-Length: 0\r\nConnection: close\r\n\r\n', 'latin1'))
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () => socket.write(Buffer.concat(lines)))
        let text = ''
        socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')))
        socket.on('end', () => resolve(text))
        socket.on('error', reject)
      })
      const outcome = outcomes.get(id)
      if (outcome === undefined) throw new Error(`the server never handed the request to the authenticator: ${answer.split('\r\n')[0]}`)
      return outcome
    }

    function principalOf(outcome: Outcome): Principal {
      expect(outcome.threw).toBeUndefined()
      expect(outcome.stageThrew).toBeUndefined()
      expect(outcome.result).toBeDefined()
      expect((outcome.result as AuthFailure).failed).toBeUndefined()
      expect(outcome.verdict).toBe(CONTINUE)
      expect(outcome.principal).toEqual(outcome.result)
      return outcome.result as Principal
    }

    /** The failure, checked against the shape the port documents and the 401 the stage makes of it. */
    function failureOf(outcome: Outcome, context: string): AuthFailure {
      expect({ context, threw: outcome.threw, stageThrew: outcome.stageThrew }).toEqual({
        context,
        threw: undefined,
        stageThrew: undefined,
      })
      const failure = outcome.result as AuthFailure
      expect({ context, failed: failure.failed }).toEqual({ context, failed: true })
      expect(typeof failure.reason).toBe('string')
      expect(failure.reason.length).toBeGreaterThan(0)
      expect(BEARER_ERRORS).toContain(failure.bearerError)
      if (failure.detail !== undefined) expect(typeof failure.detail).toBe('string')
      // The stage: a 401 refusal whose challenge carries the RFC 6750 error code when there is one.
      const refusal = outcome.verdict as Refusal
      expect(refusal).not.toBe(CONTINUE)
      expect(outcome.principal).toBeNull()
      expect(refusal.status).toBe(401)
      expect(refusal.decision).toBe('unauthorized')
      expect(refusal.message).toBe(`Unauthorized: ${failure.reason}`)
      expect(refusal.reason.startsWith(failure.reason)).toBe(true)
      expect(refusal.headers?.['cache-control']).toBe('no-store')
      const challenge = refusal.headers?.['www-authenticate'] ?? ''
      if (failure.bearerError === null) expect(challenge).toBe('Bearer realm="wardline"')
      else expect(challenge).toMatch(new RegExp(`^Bearer realm="wardline", error="${failure.bearerError}", error_description="[^"\\\\]*"$`))
      return failure
    }

    test('a valid credential gives exactly its identity and tenant, whatever characters they hold', async () => {
      const callers: Array<[string, string]> = [
        ['alice', 'acme'],
        ['José Müller', '東京'],
        ['user@example.com', 'tenant-42'],
        ['John Smith', 'a\u00a0b'], // inner whitespace is part of the value
        ['100% sure', '%41'], // percent signs are not decoded
        ['😀', 'ü'],
        ['a'.repeat(256), 'b'.repeat(256)], // exactly the limit, in bytes
        ['é'.repeat(128), '日'.repeat(85)],
      ]
      for (const [identity, tenant] of callers) {
        const headers = await fx.credential(identity, tenant)
        expect(headers).not.toBeNull()
        expect(principalOf(await present(headers as RawHeaders))).toEqual({ identity, tenant, tokenId: null, issuedAt: null })
      }
    })

    test('a credential that names no tenant gives tenant "default"', async () => {
      const headers = await fx.credential('carol')
      expect(principalOf(await present(headers as RawHeaders))).toEqual({
        identity: 'carol',
        tenant: 'default',
        tokenId: null,
        issuedAt: null,
      })
    })

    test('no credential at all is a failure without an RFC 6750 error code, and a bare challenge', async () => {
      for (const headers of [[], [['Accept', 'application/json']]] as RawHeaders[]) {
        const failure = failureOf(await present(headers), 'no credential')
        expect(failure.bearerError).toBeNull()
      }
    })

    test('every malformed or invalid credential is a failure value, never a principal and never a throw', async () => {
      const bad = await fx.invalid()
      expect(bad.length).toBeGreaterThan(0)
      for (const request of bad) failureOf(await present(request.headers, request.path), request.label)
    })

    test('two credentials for two callers in one request are refused rather than read as either', async () => {
      const headers = await fx.twoCallers({ identity: 'alice', tenant: 'acme' }, { identity: 'mallory', tenant: 'acme' })
      failureOf(await present(headers), 'two callers')
    })

    test('identity and tenant are judged by the same rules whatever carried them, and the reason never quotes the value', async () => {
      const cases: Array<[string, string | undefined, RegExp]> = [
        ['a'.repeat(257), 'acme', /identity is longer than 256 bytes$/],
        ['é'.repeat(128) + 'a', 'acme', /identity is longer than 256 bytes$/],
        ['alice', 't'.repeat(257), /tenant is longer than 256 bytes$/],
        ['ali\u0085ce', 'acme', /identity contains control characters$/],
        ['ali\tce', 'acme', /identity contains control characters$/],
        ['ali\u0000ce', 'acme', /identity contains control characters$/],
        ['alice', 'ac\u009bme', /tenant contains control characters$/],
        ['\u00a0admin', 'acme', /identity has leading or trailing whitespace$/],
        ['admin\u3000', 'acme', /identity has leading or trailing whitespace$/],
        [' admin', 'acme', /identity has leading or trailing whitespace$/],
        ['alice', '\ufeffacme', /tenant has leading or trailing whitespace$/],
        ['ali\ud800ce', 'acme', /identity is not well-formed Unicode$/],
      ]
      let carried = 0
      for (const [identity, tenant, reason] of cases) {
        const headers = await fx.credential(identity, tenant)
        if (headers === null) continue // this kind of credential cannot carry the value at all
        carried++
        const failure = failureOf(await present(headers), JSON.stringify({ identity, tenant, tokenId: null, issuedAt: null }))
        expect({ identity, tenant, reason: failure.reason }).toEqual({ identity, tenant, reason: expect.stringMatching(reason) as unknown })
        for (const value of [identity, tenant ?? '']) expect(failure.reason).not.toContain(value)
      }
      expect(carried).toBeGreaterThanOrEqual(8)
    })

    test('an empty identity is refused, not taken for an anonymous caller', async () => {
      const headers = await fx.credential('', 'acme')
      if (headers !== null) failureOf(await present(headers), 'empty identity')
    })

    test('hostile headers never make it throw, and whatever it accepts is a valid identity and tenant', async () => {
      const junk = Buffer.alloc(6000, 0xff)
      const requests: RawHeaders[] = [
        [['Authorization', '']],
        [['Authorization', 'Bearer ' + 'A'.repeat(6000)]],
        [['Authorization', Buffer.concat([Buffer.from('Bearer '), junk])]],
        [['Authorization', 'Bearer a.b.c.d.e']],
        [['Authorization', 'Bearer ....']],
        [['X-Wardline-Identity', Buffer.from([0xc3, 0x28])]], // invalid UTF-8: stays Latin-1
        [['X-Wardline-Identity', junk]],
        [['X-Wardline-Identity', '']],
        [['X-Wardline-Tenant', 'acme']],
        [
          ['X-Wardline-Identity', 'x'],
          ['X-Wardline-Tenant', Buffer.from([0xe2, 0x80, 0xa8])], // U+2028 alone
        ],
        [
          ['Authorization', 'Basic YWxpY2U6c2VjcmV0'],
          ['X-Wardline-Identity', 'alice'],
        ],
      ]
      for (const headers of requests) {
        const outcome = await present(headers)
        expect(outcome.threw).toBeUndefined()
        expect(outcome.stageThrew).toBeUndefined()
        const result = outcome.result as AuthResult
        if ((result as AuthFailure).failed === true) failureOf(outcome, JSON.stringify(headers))
        else {
          expectValidPrincipalValue((result as Principal).identity)
          expectValidPrincipalValue((result as Principal).tenant)
        }
      }
    })

    test('concurrent requests for different callers each get their own caller', async () => {
      const names = Array.from({ length: 24 }, (_, i) => [`user-${i}`, `tenant-${i % 3}`] as const)
      const credentials = await Promise.all(names.map(([identity, tenant]) => fx.credential(identity, tenant)))
      const outcomes = await Promise.all(credentials.map((headers) => present(headers as RawHeaders)))
      expect(outcomes.map(principalOf)).toEqual(names.map(([identity, tenant]) => ({ identity, tenant, tokenId: null, issuedAt: null })))
    })

    test('a refusal in between changes nothing for the next caller', async () => {
      const alice = (await fx.credential('alice', 'acme')) as RawHeaders
      expect(principalOf(await present(alice))).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
      const [first] = await fx.invalid()
      failureOf(await present(first.headers, first.path), first.label)
      expect(principalOf(await present((await fx.credential('bob', 'globex')) as RawHeaders))).toEqual({
        identity: 'bob',
        tenant: 'globex',
        tokenId: null,
        issuedAt: null,
      })
      expect(principalOf(await present(alice))).toEqual({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null })
    })
  })
}
