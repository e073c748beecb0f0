/**
 * Revocation end to end, in memory (one gateway): the real gateway between the official MCP SDK
 * client and the example MCP server, the list changed through RunningGateway.revocations (what the
 * admin API calls), the outcome read as a client and an operator see it (status, headers, body, the
 * audit trail, /metrics, /readyz).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { type Harness, MCP_HEADERS, as, metricSample, startHarness, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { SECRET, hour, hs } from './forge'

const JWT = { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } }

async function post(h: Harness, headers: Record<string, string>, id: number | string = 1): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...headers },
    body: JSON.stringify(toolCall('echo', { text: 'hi' }, id)),
  })
}

async function status(h: Harness, headers: Record<string, string>): Promise<number> {
  const res = await post(h, headers)
  await res.arrayBuffer()
  return res.status
}

async function connect(h: Harness, headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'revocation-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers } }))
  return client
}

describe('header auth, in memory', () => {
  let h: Harness
  beforeEach(async () => {
    // Stateless: a bare POST needs no session (the stream test below brings its own stateful gateway).
    h = await startHarness({ mode: 'stateless-json' })
  })
  afterEach(async () => {
    await h.close()
  })

  test('a revoked identity gets 401 invalid_token on its next call through the SDK client, and each refusal is audited once', async () => {
    const alice = await connect(h, as('alice'))
    const bob = await connect(h, as('bob'))
    try {
      expect(await alice.callTool({ name: 'echo', arguments: { text: 'before' } })).toMatchObject({ content: [{ text: 'before' }] })
      await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null, reason: 'offboarded' })
      await expect(alice.callTool({ name: 'echo', arguments: { text: 'after' } })).rejects.toThrow(/401/)
      await expect(alice.listTools()).rejects.toThrow(/401/)
      // Same session id, same upstream, another identity: unaffected.
      expect(await bob.callTool({ name: 'echo', arguments: { text: 'bob' } })).toMatchObject({ content: [{ text: 'bob' }] })
    } finally {
      await bob.close()
      await alice.close().catch(() => undefined)
    }
    const refused = (await h.audit()).filter((e) => e.decision === 'unauthorized')
    // The SDK's own DELETE at close() is refused too: every request alice sends after the revocation is.
    expect(refused.length).toBeGreaterThanOrEqual(2)
    expect(refused.map((e) => [e.identity, e.tenant, e.status, e.reason])).toEqual(
      refused.map(() => ['alice', 'acme', 401, 'revoked identity']),
    )
    expect(new Set(refused.map((e) => e.request_id)).size).toBe(refused.length)
    expect(await metricSample(h.url, 'wardline_revoked_requests_total')).toBe(refused.length)
    expect(await metricSample(h.url, 'wardline_revocations_active')).toBe(1)
  })

  test('the refusal is what an RFC 6750 client expects: 401, Bearer invalid_token, a JSON-RPC error, nothing forwarded', async () => {
    await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: new Date(Date.now() + 3_600_000) })
    const before = h.upstream.seen.length
    const res = await post(h, as('alice'), 7)
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="wardline", error="invalid_token", error_description="revoked"')
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('mcp-session-id')).toBeNull()
    expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 401, message: 'Unauthorized: revoked' } })
    expect(h.upstream.seen.length).toBe(before)
    const entry = (await h.audit()).at(-1)
    expect(entry).toMatchObject({ decision: 'unauthorized', status: 401, identity: 'alice', tenant: 'acme', method: 'POST' })
    expect(entry?.reason).toMatch(/^revoked identity until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  })

  test('matching is exact: Alice and ACME are other principals; a caller without a tenant is tenant "default"', async () => {
    await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null })
    await h.gateway.revocations.revoke({ identity: 'carol', tenant: 'default', until: null })
    expect(await status(h, as('Alice'))).toBe(200)
    expect(await status(h, as('alice', 'ACME'))).toBe(200)
    expect(await status(h, as('alice', 'default'))).toBe(200)
    expect(await status(h, { 'x-wardline-identity': 'alice' })).toBe(200) // no tenant header: tenant default
    expect(await status(h, { 'x-wardline-identity': 'carol' })).toBe(401)
    expect(await status(h, as('carol', 'default'))).toBe(401) // the same principal, spelt out
    expect(await status(h, as('carol'))).toBe(200) // carol of acme is someone else
  })

  test('identity * refuses every identity of the tenant, a caller literally named * included, and no other tenant', async () => {
    await h.gateway.revocations.revoke({ identity: '*', tenant: 'acme', until: null })
    expect(await status(h, as('alice'))).toBe(401)
    expect(await status(h, as('*'))).toBe(401)
    expect(await status(h, as('alice', 'globex'))).toBe(200)
    expect((await h.audit()).at(-2)?.reason).toBe('revoked identity (whole tenant)')
    expect(await h.gateway.revocations.remove({ identity: '*', tenant: 'acme' })).toBe(true)
    expect(await status(h, as('alice'))).toBe(200)
  })

  test('odd characters (quotes, backslash, percent, UTF-8, 256 bytes) match exactly and are audited as they are', async () => {
    const odd = ['o\'brien "x" \\y', '%41lice', 'josé', 'j'.repeat(256)]
    for (const identity of odd) await h.gateway.revocations.revoke({ identity, tenant: 'te"nant', until: null })
    for (const identity of odd) {
      // Header values travel as UTF-8 bytes, the way a proxy in front of header mode sends them.
      const headers = { 'x-wardline-identity': Buffer.from(identity, 'utf8').toString('latin1'), 'x-wardline-tenant': 'te"nant' }
      expect(await status(h, headers)).toBe(401)
    }
    expect(await status(h, as('Alice', 'te"nant'))).toBe(200) // %41 is not decoded into A
    const refused = (await h.audit()).filter((e) => e.decision === 'unauthorized')
    expect(refused.map((e) => e.identity)).toEqual(odd)
  })

  test('an expired revocation lets the identity back at once; remove() lets it back', async () => {
    await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: new Date(Date.now() + 400) })
    await h.gateway.revocations.revoke({ identity: 'bob', tenant: 'acme', until: null })
    expect(await status(h, as('alice'))).toBe(401)
    await waitFor(async () => (await status(h, as('alice'))) === 200, { what: 'alice back once her revocation ended', intervalMs: 50 })
    expect(await metricSample(h.url, 'wardline_revocations_active')).toBe(1)
    expect(await status(h, as('bob'))).toBe(401)
    expect(await h.gateway.revocations.remove({ identity: 'bob', tenant: 'acme' })).toBe(true)
    expect(await status(h, as('bob'))).toBe(200)
    expect(await metricSample(h.url, 'wardline_revocations_active')).toBe(0)
  })

  test('/readyz reports the list: ok, in memory, how many apply', async () => {
    await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null })
    const body = await (await fetch(`${h.url}/readyz`)).json()
    expect(body).toMatchObject({ status: 'ready', revocations: 'ok', revocations_storage: 'memory', revocations_active: 1 })
  })

  test('a stream already open is not cut by a revocation: it runs to its end; the next request is refused', async () => {
    await h.close()
    h = await startHarness({ mode: 'stateful' })
    const alice = await connect(h, as('alice'))
    try {
      const pending: { revoked: Promise<unknown> | null } = { revoked: null }
      const progress: number[] = []
      const result = await alice.callTool({ name: 'count_slowly', arguments: { n: 5, delay_ms: 100 } }, undefined, {
        onprogress: (p) => {
          progress.push(p.progress)
          pending.revoked ??= h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null })
        },
      })
      expect(pending.revoked).not.toBeNull()
      await pending.revoked
      expect(progress).toEqual([1, 2, 3, 4, 5])
      expect(result).toMatchObject({ content: [{ text: 'counted to 5' }] })
      await expect(alice.callTool({ name: 'echo', arguments: { text: 'x' } })).rejects.toThrow(/401/)
    } finally {
      await alice.close().catch(() => undefined)
    }
    const entries = await h.audit()
    expect(entries.find((e) => e.tool === 'count_slowly')).toMatchObject({ decision: 'allow', status: 200 })
  })
})

describe('jwt auth, in memory', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: JWT } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a token already in the token cache is refused once its identity is revoked', async () => {
    const token = await hs({ sub: 'alice', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline', exp: hour() })
    const bearer = { authorization: `Bearer ${token}` }
    expect(await status(h, bearer)).toBe(200)
    expect(await status(h, bearer)).toBe(200) // answered from the cache from now on
    await h.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null })
    const res = await post(h, bearer)
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toContain('error="invalid_token"')
    expect(await h.gateway.revocations.remove({ identity: 'alice', tenant: 'acme' })).toBe(true)
    expect(await status(h, bearer)).toBe(200)
  })

  test('revoking tenant "default" reaches a token without a tenant claim, not one whose claim names another tenant', async () => {
    const claims = { sub: 'dora', iss: 'https://idp.example', aud: 'wardline', exp: hour() }
    const noTenant = { authorization: `Bearer ${await hs(claims)}` }
    const acme = { authorization: `Bearer ${await hs({ ...claims, tenant: 'acme' })}` }
    await h.gateway.revocations.revoke({ identity: 'dora', tenant: 'default', until: null })
    expect(await status(h, noTenant)).toBe(401)
    expect(await status(h, acme)).toBe(200)
    expect((await h.audit()).filter((e) => e.identity === 'dora').map((e) => [e.identity, e.tenant])).toEqual([
      ['dora', 'default'],
      ['dora', 'acme'],
    ])
  })

  const claims = (sub: string, extra: Record<string, unknown>): Record<string, unknown> => ({
    sub,
    tenant: 'acme',
    iss: 'https://idp.example',
    aud: 'wardline',
    exp: hour(),
    ...extra,
  })

  test('a revoked jti refuses that token, a cache hit included, while another token of the same identity works; lifting it lets it back', async () => {
    const leaked = { authorization: `Bearer ${await hs(claims('erin', { jti: 'erin-leaked', iat: Math.floor(Date.now() / 1000) }))}` }
    const other = { authorization: `Bearer ${await hs(claims('erin', { jti: 'erin-other', iat: Math.floor(Date.now() / 1000) }))}` }
    expect(await status(h, leaked)).toBe(200)
    expect(await status(h, leaked)).toBe(200) // in the token cache from now on
    await h.gateway.revocations.revoke({ kind: 'jti', jti: 'erin-leaked', until: null })
    const res = await post(h, leaked)
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="wardline", error="invalid_token", error_description="revoked"')
    expect(await status(h, other)).toBe(200)
    const entries = (await h.audit()).filter((e) => e.identity === 'erin')
    const refused = entries.filter((e) => e.decision === 'unauthorized')
    expect(refused.map((e) => e.reason)).toEqual(['revoked token (jti "erin-leaked")'])
    // The audit trail names the revocation, never the token.
    const leakedToken = leaked.authorization.slice('Bearer '.length)
    for (const e of entries) expect(JSON.stringify(e)).not.toContain(leakedToken.split('.')[2])
    expect(await h.gateway.revocations.remove({ kind: 'jti', jti: 'erin-leaked' })).toBe(true)
    expect(await status(h, leaked)).toBe(200)
  })

  test('issued before T: a cached old token is refused, a token minted after T works, a token without iat is refused', async () => {
    const nowS = Math.floor(Date.now() / 1000)
    const old = { authorization: `Bearer ${await hs(claims('fay', { jti: 'fay-1', iat: nowS - 600 }))}` }
    const noIat = { authorization: `Bearer ${await hs(claims('fay', { jti: 'fay-2' }))}` }
    expect(await status(h, old)).toBe(200)
    expect(await status(h, old)).toBe(200) // cached
    expect(await status(h, noIat)).toBe(200)
    const before = new Date((nowS - 60) * 1000)
    await h.gateway.revocations.revoke({ kind: 'issued_before', identity: 'fay', tenant: 'acme', issuedBefore: before, until: null })
    expect(await status(h, old)).toBe(401)
    expect(await status(h, noIat)).toBe(401)
    const fresh = { authorization: `Bearer ${await hs(claims('fay', { jti: 'fay-3', iat: nowS }))}` }
    expect(await status(h, fresh)).toBe(200)
    const other = { authorization: `Bearer ${await hs(claims('gus', { iat: nowS - 600 }))}` }
    expect(await status(h, other)).toBe(200) // another identity of the tenant
    const reasons = (await h.audit()).filter((e) => e.identity === 'fay' && e.decision === 'unauthorized').map((e) => e.reason)
    expect(reasons).toEqual([
      `revoked tokens issued before ${before.toISOString()} (this one issued ${new Date((nowS - 600) * 1000).toISOString()})`,
      `revoked tokens issued before ${before.toISOString()} (this one has no iat)`,
    ])
  })
})
