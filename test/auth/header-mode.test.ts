/** auth.mode: header, for trusted internal networks: identity from X-Wardline-Identity, verified by nobody. */
import { Writable } from 'node:stream'
import winston from 'winston'
import { startGateway } from '../../src/server/compose'
import { type Harness, MCP_HEADERS, as, configFrom, startHarness, toolCall } from '../helpers/harness'

async function whoami(h: Harness, headers: Record<string, string>): Promise<{ status: number; body: unknown; challenge: string | null }> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...headers },
    body: JSON.stringify(toolCall('whoami')),
  })
  const body = (await res.json()) as { result?: { content: Array<{ text: string }> }; error?: { message: string } }
  return {
    status: res.status,
    body: body.result ? JSON.parse(body.result.content[0].text) : body.error?.message,
    challenge: res.headers.get('www-authenticate'),
  }
}

describe('header mode', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: { mode: 'header' } } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('the identity and tenant headers become the caller, and reach the upstream as sent', async () => {
    expect(await whoami(h, as('alice', 'acme'))).toEqual({
      status: 200,
      body: { identity: 'alice', tenant: 'acme', authorization: null },
      challenge: null,
    })
    expect((await h.audit()).at(-1)).toMatchObject({ identity: 'alice', tenant: 'acme', decision: 'allow' })
  })

  test('a missing tenant header is tenant "default"', async () => {
    expect((await whoami(h, { 'x-wardline-identity': 'bob' })).body).toEqual({ identity: 'bob', tenant: 'default', authorization: null })
  })

  test('a missing or empty identity header is a 401, not an anonymous caller', async () => {
    for (const headers of [{}, { 'x-wardline-identity': '' }, { 'x-wardline-tenant': 'acme' }] as Array<Record<string, string>>) {
      expect(await whoami(h, headers)).toEqual({
        status: 401,
        body: 'Unauthorized: missing X-Wardline-Identity header',
        challenge: 'Bearer realm="wardline"',
      })
    }
    expect((await h.audit()).at(-1)).toMatchObject({
      decision: 'unauthorized',
      status: 401,
      identity: '',
      reason: 'missing X-Wardline-Identity header',
    })
  })

  test('identities with control characters or over 256 bytes are refused; Unicode is fine', async () => {
    expect((await whoami(h, as('a'.repeat(257)))).body).toBe('Unauthorized: identity is longer than 256 bytes')
    expect((await whoami(h, as('alice', 'ac\tme'))).body).toBe('Unauthorized: tenant contains control characters')
    // HTTP headers are latin-1 on the wire; a UTF-8 identity arrives as its bytes, opaque but intact.
    expect((await whoami(h, as('zoë', 'acme'))).status).toBe(200)
  })

  test('a client Authorization header is not forwarded in header mode either', async () => {
    const before = h.upstream.seen.length
    expect((await whoami(h, { ...as('alice'), authorization: 'Bearer secret-of-the-client' })).status).toBe(200)
    expect(h.upstream.seen.slice(before).map((r) => r.headers.authorization)).toEqual([undefined])
  })
})

test('starting in header mode warns that identities are unauthenticated', async () => {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk))
      done()
    },
  })
  const log = winston.createLogger({
    level: 'warn',
    format: winston.format.json(),
    transports: [new winston.transports.Stream({ stream: sink })],
  })
  const gateway = await startGateway(
    configFrom({ listen: '127.0.0.1:0', upstream: 'http://127.0.0.1:9', auth: { mode: 'header' }, audit: { output: 'stdout' } }),
    { log },
  )
  await gateway.shutdown()
  expect(lines.map((l) => JSON.parse(l) as { level: string; message: string })).toContainEqual({
    level: 'warn',
    message: expect.stringMatching(/header.*unverified/) as unknown,
  })
})
