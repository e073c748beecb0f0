import { connect } from 'node:net'
/**
 * The gateway in jwt mode, end to end: real HTTP, the example MCP server upstream, the audit trail
 * read back, and the official SDK client carrying its token in requestInit.headers.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { type Harness, MCP_HEADERS, configProblems, rpc, startHarness, toolCall } from '../helpers/harness'
import { SECRET, hour, hs, rsaKey, signWith, unsigned } from './forge'

const JWT = { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } }
const GOOD = { sub: 'alice', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline' }

async function post(h: Harness, body: unknown, headers: Record<string, string> = {}, path = '/mcp'): Promise<Response> {
  return fetch(`${h.url}${path}`, { method: 'POST', headers: { ...MCP_HEADERS, ...headers }, body: JSON.stringify(body) })
}

interface RpcError {
  error: { code: number; message: string }
}

const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` })

function textOf(result: unknown): string {
  return (result as { content: Array<{ text: string }> }).content[0].text
}

describe('jwt mode through the gateway', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: JWT } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a request without a token gets 401, a challenge without an error code, and an audit line', async () => {
    const before = h.upstream.seen.length
    const res = await post(h, toolCall('echo', { text: 'hi' }, 7))
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="wardline"')
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.headers.get('mcp-session-id')).toBeNull()
    expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 401, message: 'Unauthorized: missing bearer token' } })
    expect(h.upstream.seen.length).toBe(before)
    const entry = (await h.audit()).at(-1)
    expect(entry).toMatchObject({ decision: 'unauthorized', status: 401, identity: '', tenant: '', reason: 'missing bearer token' })
  })

  test('two Authorization headers are refused, whichever one holds a valid token', async () => {
    const good = await hs({ ...GOOD, exp: hour() })
    const port = Number(new URL(h.url).port)
    const reply = await new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () =>
        socket.write(
          `POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${good}\r\nauthorization: Bearer other\r\ncontent-length: 2\r\n\r\n{}`,
        ),
      )
      let data = ''
      socket.on('data', (c: Buffer) => {
        data += c.toString('utf8')
        if (data.includes('}}')) {
          resolve(data)
          socket.destroy()
        }
      })
      socket.on('error', reject)
    })
    expect(reply).toMatch(/^HTTP\/1\.1 401 /)
    expect(reply).toContain('error="invalid_request"')
    expect((await h.audit()).at(-1)).toMatchObject({ decision: 'unauthorized', reason: 'more than one Authorization header' })
  })

  test('each bad token gets 401 with error="invalid_token", a message naming the check, and never the token echoed', async () => {
    const now = Math.floor(Date.now() / 1000)
    const cases: Array<[string, string]> = [
      [await hs({ ...GOOD, exp: hour() }, 'the-wrong-secret-but-long-enough-0123456789'), 'bad token signature'],
      [unsigned({ ...GOOD, exp: hour() }), 'unsigned token (alg "none") not accepted'],
      [await signWith(await rsaKey('k1'), { ...GOOD, exp: hour() }), 'token algorithm not allowed'],
      [await hs({ ...GOOD, exp: now - 600 }), 'token expired'],
      [await hs({ ...GOOD, nbf: now + 600, exp: hour() }), 'token not yet valid'],
      [await hs({ ...GOOD, iss: 'https://evil.example', exp: hour() }), 'wrong token issuer'],
      [await hs({ ...GOOD, aud: 'another-api', exp: hour() }), 'wrong token audience'],
      [await hs({ ...GOOD, sub: undefined, exp: hour() }), 'token has no "sub" claim'],
      [await hs({ ...GOOD, sub: { id: 1 } as unknown as string, exp: hour() }), 'token claim "sub" is not a string'],
      // A lone surrogate has no UTF-8 form: it could become neither a header nor a budget key.
      [await hs({ ...GOOD, sub: 'alice\ud800', exp: hour() }), 'token identity is not well-formed Unicode'],
      [await hs({ ...GOOD, tenant: '\udfff', exp: hour() }), 'token tenant is not well-formed Unicode'],
      ['garbage', 'malformed token'],
    ]
    const before = h.upstream.seen.length
    for (const [token, reason] of cases) {
      const res = await post(h, rpc('tools/list', {}, 3), bearer(token))
      const text = await res.text()
      expect([res.status, JSON.parse(text)]).toEqual([
        401,
        { jsonrpc: '2.0', id: null, error: { code: 401, message: `Unauthorized: ${reason}` } },
      ])
      expect(res.headers.get('www-authenticate')).toBe(
        `Bearer realm="wardline", error="invalid_token", error_description="${reason.replace(/"/g, "'")}"`,
      )
      expect(text).not.toContain(token)
    }
    expect(h.upstream.seen.length).toBe(before)
    const entries = (await h.audit()).slice(-cases.length)
    // The audit reason may add, for operators, what jose said; it starts with what the caller was told.
    expect(entries.map((e) => [e.decision, e.status, e.reason])).toEqual(
      cases
        .map(([, reason]) => ['unauthorized', 401, reason])
        .map(([d, s, reason]) => [d, s, reason === 'malformed token' ? 'malformed token (Invalid Compact JWS (ERR_JWS_INVALID))' : reason]),
    )
  })

  test('the token is read from the Authorization header only, never from the query string or another scheme', async () => {
    const token = await hs({ ...GOOD, exp: hour() })
    const before = h.upstream.seen.length
    // Refused even beside a valid header: forwarded, the query would hand the token to the upstream.
    for (const headers of [{}, bearer(token)]) {
      const query = await post(h, rpc('tools/list'), headers, `/mcp?x=1&access%5Ftoken=${token}`) // decoded upstream too
      expect(query.status).toBe(401)
      expect(query.headers.get('www-authenticate')).toContain('error="invalid_request"')
      const text = await query.text()
      expect((JSON.parse(text) as RpcError).error.message).toBe(
        'Unauthorized: access token in the URL query: send it in the Authorization header',
      )
      expect(text).not.toContain(token)
    }
    expect(h.upstream.seen.length).toBe(before)
    expect((await h.audit()).at(-1)).toMatchObject({
      decision: 'unauthorized',
      reason: 'access token in the URL query: send it in the Authorization header',
    })
    expect((await post(h, rpc('tools/list'), bearer(token), '/mcp?not_access_token=1')).status).toBe(200)
    const basic = await post(h, rpc('tools/list'), { authorization: `Basic ${Buffer.from('alice:pw').toString('base64')}` })
    expect([basic.status, basic.headers.get('www-authenticate')]).toEqual([401, 'Bearer realm="wardline"'])
    const empty = await post(h, rpc('tools/list'), { authorization: 'Bearer ' })
    expect([empty.status, ((await empty.json()) as RpcError).error.message]).toEqual([401, 'Unauthorized: malformed Authorization header'])
    const lower = await post(h, rpc('tools/list'), { authorization: `bearer ${token}` })
    expect(lower.status).toBe(200)
  })

  test('the upstream gets the verified identity, never the token, and never client-sent identity headers', async () => {
    const token = await hs({ ...GOOD, exp: hour() })
    const before = h.upstream.seen.length
    const res = await post(h, toolCall('whoami', {}, 9), {
      ...bearer(token),
      'x-wardline-identity': 'mallory',
      'x-wardline-tenant': 'evil-corp',
      // CGI-style servers read these as the same headers: dropped too.
      x_wardline_identity: 'mallory',
      X_Wardline_Tenant: 'evil-corp',
    })
    expect(res.status).toBe(200)
    const body = (await res.json()) as { result: { content: Array<{ text: string }> } }
    expect(JSON.parse(body.result.content[0].text)).toEqual({ identity: 'alice', tenant: 'acme', authorization: null })
    const reached = h.upstream.seen.slice(before)
    expect(reached).toHaveLength(1)
    expect(reached[0].headers.authorization).toBeUndefined()
    expect(
      Object.keys(reached[0].headers)
        .filter((name) => /wardline|authorization/.test(name))
        .sort(),
    ).toEqual(['x-wardline-identity', 'x-wardline-request-id', 'x-wardline-tenant'])
    expect(reached[0].headers['x-wardline-identity']).toBe('alice')
    expect(reached[0].headers['x-wardline-tenant']).toBe('acme')
    expect((await h.audit()).at(-1)).toMatchObject({
      method: 'tools/call',
      tool: 'whoami',
      decision: 'allow',
      identity: 'alice',
      tenant: 'acme',
    })
  })

  test('a token without a tenant claim is tenant "default" in the upstream headers and the audit line', async () => {
    const token = await hs({ ...GOOD, tenant: undefined, exp: hour() })
    const res = await post(h, toolCall('whoami'), bearer(token))
    const body = (await res.json()) as { result: { content: Array<{ text: string }> } }
    expect(JSON.parse(body.result.content[0].text)).toEqual({ identity: 'alice', tenant: 'default', authorization: null })
    expect((await h.audit()).at(-1)).toMatchObject({ identity: 'alice', tenant: 'default', decision: 'allow' })
  })
})

describe('the official SDK client with a bearer token', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateful', config: { auth: JWT } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('requestInit.headers.Authorization carries it through a whole session; the server sees only the verified identity', async () => {
    const token = await hs({ ...GOOD, sub: 'bob', exp: hour() })
    const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    })
    const client = new Client({ name: 'auth-e2e', version: '1.0.0' })
    await client.connect(transport)
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'through' } }))).toBe('through')
    expect(JSON.parse(textOf(await client.callTool({ name: 'whoami', arguments: {} })))).toEqual({
      identity: 'bob',
      tenant: 'acme',
      authorization: null,
    })
    await client.close()
    for (const r of h.upstream.seen) expect(r.headers.authorization).toBeUndefined()
    const entries = await h.audit()
    expect(entries.length).toBeGreaterThanOrEqual(4)
    for (const e of entries) expect([e.identity, e.tenant]).toEqual(['bob', 'acme'])
  })

  test('without a token the SDK client cannot connect, and nothing reaches the server', async () => {
    const before = h.upstream.seen.length
    const client = new Client({ name: 'auth-e2e', version: '1.0.0' })
    await expect(client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`)))).rejects.toThrow(/401|Unauthorized/)
    expect(h.upstream.seen.length).toBe(before)
  })
})

describe('OAuth protected resource metadata (RFC 9728)', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      mode: 'stateless-json',
      config: {
        auth: {
          ...JWT,
          resource_metadata_url: 'https://mcp.example/.well-known/oauth-protected-resource/mcp',
          resource_metadata: {
            resource: 'https://mcp.example/mcp',
            authorization_servers: ['https://idp.example'],
            scopes_supported: ['mcp'],
          },
        },
      },
    })
  })
  afterAll(async () => {
    await h.close()
  })

  test('every 401 points at the metadata document, with or without an error code', async () => {
    const missing = await post(h, rpc('tools/list'))
    expect(missing.headers.get('www-authenticate')).toBe(
      'Bearer realm="wardline", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp"',
    )
    const expired = await post(h, rpc('tools/list'), bearer(await hs({ ...GOOD, exp: 1000 })))
    expect(expired.headers.get('www-authenticate')).toBe(
      'Bearer realm="wardline", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp", error="invalid_token", error_description="token expired"',
    )
  })

  test('the challenge stays one valid header whatever the config holds: a quote in the URL, a claim name outside ASCII', async () => {
    const odd = await startHarness({
      mode: 'stateless-json',
      config: {
        auth: { ...JWT, jwt: { ...JWT.jwt, identity_claim: 'ユーザー' }, resource_metadata_url: 'https://mcp.example/x", error="evil' },
      },
    })
    try {
      const res = await post(odd, rpc('tools/list'), bearer(await hs({ ...GOOD, exp: hour() })))
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toBe(
        'Bearer realm="wardline", resource_metadata="https://mcp.example/x%22,%20error=%22evil", error="invalid_token", error_description="token has no \'????\' claim"',
      )
      expect((await odd.audit()).at(-1)).toMatchObject({ decision: 'unauthorized', status: 401, reason: 'token has no "ユーザー" claim' })
    } finally {
      await odd.close()
    }
  })

  test('a resource_metadata_url that would still break the quoted string is a config error', () => {
    for (const url of ['https://a"b.example/meta', 'https://as.example/meta?x=\\']) {
      expect(configProblems(`upstream: http://127.0.0.1:1\nauth:\n  mode: header\n  resource_metadata_url: '${url}'\n`)).toEqual([
        'auth.resource_metadata_url: must not contain " or \\ or characters outside printable ASCII (percent-encode them)',
      ])
    }
  })

  test('the gateway serves the metadata at the root and at the MCP path, without a token and without auditing it', async () => {
    const auditedBefore = (await h.audit()).length
    for (const path of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
      const res = await fetch(`${h.url}${path}`)
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('application/json')
      expect(await res.json()).toEqual({
        resource: 'https://mcp.example/mcp',
        authorization_servers: ['https://idp.example'],
        scopes_supported: ['mcp'],
        bearer_methods_supported: ['header'],
      })
    }
    expect((await h.audit()).length).toBe(auditedBefore)
  })
})
