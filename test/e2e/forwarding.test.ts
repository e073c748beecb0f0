/**
 * What the gateway changes on the way through (hop-by-hop headers, credentials, identity headers) and
 * what it must not (method, path, query, status, body bytes, MCP headers), and the audit entries it writes.
 */
import { request } from 'node:http'
import { type Harness, as, rpc, startHarness, toolCall } from '../helpers/harness'
import { type Reply, send } from '../helpers/http-client'
import { type RawUpstream, startRawUpstream } from './raw-upstream'

/** The upstream answers with every header a test may look for, hop-by-hop ones included. */
const UPSTREAM_RESPONSE_HEADERS: Record<string, string> = {
  'content-type': 'application/json',
  'mcp-session-id': 'session-from-upstream',
  'mcp-protocol-version': '2025-06-18',
  'www-authenticate': 'Bearer error="insufficient_scope"',
  'retry-after': '3',
  'ratelimit-policy': '"tool";q=10;w=60',
  ratelimit: '"tool";r=9;t=60',
  'keep-alive': 'timeout=5',
  'proxy-authenticate': 'Basic',
  'x-secret-hop': 'upstream-only',
  connection: 'keep-alive, x-secret-hop',
  'x-wardline-request-id': 'forged-by-upstream',
}

let upstream: RawUpstream
let h: Harness
beforeAll(async () => {
  upstream = await startRawUpstream((req, res) => {
    const status = req.url?.includes('status=418') ? 418 : req.method === 'OPTIONS' ? 204 : 200
    res.writeHead(status, UPSTREAM_RESPONSE_HEADERS)
    res.end(req.method === 'HEAD' || status === 204 ? undefined : JSON.stringify({ jsonrpc: '2.0', id: 1, result: {} }))
  })
  // A base path on the upstream URL: request paths are appended to it.
  h = await startHarness({ upstreamUrl: `${upstream.url}/base/` })
})
afterAll(async () => {
  await h.close()
  await upstream.close()
})

describe('forwarding', () => {
  test('method, path under the upstream base path, query, status and the exact body bytes are preserved', async () => {
    // Odd spacing, key order and escapes: a re-serialised body would differ.
    const body = '{ "id" :1,"method":"tools/call",  "jsonrpc":"2.0","params":{"name":"echo","arguments":{"text":"caf\\u00e9 ☕"}}}\n'
    const res = await send(`${h.url}/mcp/v1?status=418&x=a%20b`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, body)
    expect(res.status).toBe(418)
    const seen = upstream.seen.at(-1)
    expect(seen).toMatchObject({ method: 'POST', url: '/base/mcp/v1?status=418&x=a%20b', body })
    expect(seen?.headers['content-length']).toBe(String(Buffer.byteLength(body)))
  })

  test('a POST sent with Expect: 100-continue (curl does this for large bodies) is forwarded, not a 502', async () => {
    const body = JSON.stringify(toolCall('echo', { text: 'z'.repeat(2000) }))
    const res = await new Promise<Reply>((resolve, reject) => {
      const req = request(
        `${h.url}/mcp`,
        {
          method: 'POST',
          headers: {
            ...as('alice'),
            'content-type': 'application/json',
            expect: '100-continue',
            'content-length': Buffer.byteLength(body),
          },
        },
        (r) => {
          let text = ''
          r.on('data', (c: Buffer) => (text += c.toString('utf8')))
          r.on('end', () => resolve({ status: r.statusCode ?? 0, headers: r.headers, body: text }))
        },
      )
      req.on('continue', () => req.end(body)) // the body only after the gateway said 100 Continue
      req.on('error', reject)
    })
    expect(res.status).toBe(200)
    expect(upstream.seen.at(-1)?.body).toBe(body)
    expect(upstream.seen.at(-1)?.headers.expect).toBeUndefined()
  })

  test.each(['GET', 'DELETE', 'HEAD', 'OPTIONS'])('%s is forwarded with its status', async (method) => {
    const res = await send(`${h.url}/mcp?q=1`, method, as('alice'))
    expect(res.status).toBe(method === 'OPTIONS' ? 204 : 200)
    expect(upstream.seen.at(-1)).toMatchObject({ method, url: '/base/mcp?q=1' })
  })

  test('a body on DELETE or OPTIONS is forwarded as received, not dropped; over max_body_bytes it is a 413', async () => {
    for (const method of ['DELETE', 'OPTIONS']) {
      const res = await fetch(`${h.url}/mcp`, {
        method,
        headers: { ...as('alice'), 'content-type': 'application/json' },
        body: '{"reason":"done"}',
      })
      await res.arrayBuffer()
      expect(upstream.seen.at(-1)).toMatchObject({ method, body: '{"reason":"done"}' })
      expect(upstream.seen.at(-1)?.headers['content-length']).toBe('17')
    }
    const before = upstream.seen.length
    const big = await fetch(`${h.url}/mcp`, { method: 'DELETE', headers: as('alice'), body: 'x'.repeat(h.config.limits.maxBodyBytes + 1) })
    expect(big.status).toBe(413)
    expect(upstream.seen.length).toBe(before)
  })

  test('hop-by-hop request headers, Authorization and client copies of the identity headers never reach the upstream; MCP headers do', async () => {
    await send(
      `${h.url}/mcp`,
      'POST',
      {
        'x-wardline-identity': 'alice',
        'x-wardline-tenant': 'acme',
        'x-wardline-request-id': 'forged-by-client',
        authorization: 'Bearer client-secret',
        'proxy-authorization': 'Basic abc',
        connection: 'keep-alive, x-client-hop',
        'keep-alive': 'timeout=5',
        'x-client-hop': 'client-only',
        te: 'trailers',
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': 's-1',
        'mcp-protocol-version': '2025-06-18',
        'last-event-id': 'ev-9',
        'mcp-method': 'tools/call',
        'mcp-name': 'echo',
        'mcp-param-region': 'eu',
        'x-custom': 'kept',
      },
      JSON.stringify(toolCall('echo')),
    )
    const got = upstream.seen.at(-1)?.headers ?? {}
    for (const dropped of ['authorization', 'proxy-authorization', 'keep-alive', 'x-client-hop', 'te']) expect(got[dropped]).toBeUndefined()
    expect(got).toMatchObject({
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-session-id': 's-1',
      'mcp-protocol-version': '2025-06-18',
      'last-event-id': 'ev-9',
      'mcp-method': 'tools/call',
      'mcp-name': 'echo',
      'mcp-param-region': 'eu',
      'x-custom': 'kept',
      'x-wardline-identity': 'alice',
      'x-wardline-tenant': 'acme',
    })
    expect(got['x-wardline-request-id']).toMatch(/^[0-9a-f-]{36}$/)
    // Set once, by the gateway: the client's copy was removed rather than joined.
    const raw = upstream.seen.at(-1)?.rawHeaders ?? []
    expect(raw.filter((_, i) => i % 2 === 0 && raw[i].toLowerCase() === 'x-wardline-identity')).toHaveLength(1)
    expect(raw.filter((_, i) => i % 2 === 0 && raw[i].toLowerCase() === 'x-wardline-request-id')).toHaveLength(1)
  })

  test('hop-by-hop response headers are dropped; MCP, auth and rate-limit headers come back', async () => {
    const res = await send(`${h.url}/mcp`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, JSON.stringify(rpc('ping')))
    expect(res.headers).toMatchObject({
      'content-type': 'application/json',
      'mcp-session-id': 'session-from-upstream',
      'mcp-protocol-version': '2025-06-18',
      'www-authenticate': 'Bearer error="insufficient_scope"',
      'retry-after': '3',
      'ratelimit-policy': '"tool";q=10;w=60',
      ratelimit: '"tool";r=9;t=60',
    })
    expect(res.headers['proxy-authenticate']).toBeUndefined()
    expect(res.headers['x-secret-hop']).toBeUndefined()
    // The gateway's own request id replaces whatever the upstream sent, once.
    expect(res.headers['x-wardline-request-id']).toMatch(/^[0-9a-f-]{36}$/)
  })
})

describe('the audit trail', () => {
  test('every proxied request leaves exactly one entry, under the request id the client was given', async () => {
    const before = (await h.audit()).length
    const ids: string[] = []
    for (const [method, body] of [
      ['POST', JSON.stringify(toolCall('echo'))],
      ['POST', JSON.stringify(rpc('tools/list'))],
      ['GET'],
      ['DELETE'],
      ['HEAD'],
      ['OPTIONS'],
    ] as const) {
      const res = await send(`${h.url}/mcp`, method, { ...as('bob', 'globex'), 'content-type': 'application/json' }, body)
      ids.push(String(res.headers['x-wardline-request-id']))
    }
    const entries = (await h.audit()).slice(before)
    expect(entries.map((e) => e.request_id)).toEqual(ids)
    expect(entries.map((e) => [e.method, e.tool, e.decision, e.identity, e.tenant])).toEqual([
      ['tools/call', 'echo', 'allow', 'bob', 'globex'],
      ['tools/list', '', 'passthrough', 'bob', 'globex'],
      ['GET', '', 'passthrough', 'bob', 'globex'],
      ['DELETE', '', 'passthrough', 'bob', 'globex'],
      ['HEAD', '', 'passthrough', 'bob', 'globex'],
      ['OPTIONS', '', 'passthrough', 'bob', 'globex'],
    ])
  })

  test('a batch gets one entry per gated element plus one for the rest', async () => {
    const before = (await h.audit()).length
    const batch = [
      toolCall('echo', {}, 1),
      rpc('tools/list', undefined, 2),
      rpc('resources/read', { uri: 'example://readme' }, 3),
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      rpc('prompts/get', { name: 'greeting' }, 4),
    ]
    const res = await send(`${h.url}/mcp`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, JSON.stringify(batch))
    const id = String(res.headers['x-wardline-request-id'])
    const entries = (await h.audit()).slice(before)
    expect(entries.map((e) => [e.request_id, e.method, e.tool, e.decision])).toEqual([
      [`${id}/0`, 'tools/call', 'echo', 'allow'],
      [`${id}/2`, 'resources/read', 'example://readme', 'allow'],
      [`${id}/4`, 'prompts/get', 'greeting', 'allow'],
      [`${id}/rest`, 'tools/list,notifications/initialized', '', 'passthrough'],
    ])
  })

  test('entry keys come in the documented order, optional ones omitted when empty', async () => {
    const before = (await h.audit()).length
    await send(`${h.url}/mcp`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, JSON.stringify(toolCall('echo')))
    await send(`${h.url}/mcp`, 'POST', { ...as('alice'), 'content-type': 'application/json', 'mcp-session-id': 's-7' }, '{broken')
    const [plain, full] = (await h.audit()).slice(before)
    const core = ['timestamp', 'request_id', 'identity', 'tenant', 'method', 'tool', 'decision', 'status', 'latency_ms']
    expect(Object.keys(plain)).toEqual(core)
    expect(Object.keys(full)).toEqual([...core, 'reason_code', 'reason', 'session_id'])
    expect(plain.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(Math.abs(Date.parse(plain.timestamp) - Date.now())).toBeLessThan(60_000)
    expect(typeof plain.latency_ms).toBe('number')
    expect(plain.latency_ms).toBeGreaterThan(0)
    expect(full).toMatchObject({ decision: 'error', status: 400, reason_code: 'jsonrpc.invalid', session_id: 's-7' })
  })

  test('the session id of a legacy SSE message post comes from its query string', async () => {
    const before = (await h.audit()).length
    await send(
      `${h.url}/messages?sessionId=abc%2D123&x=1`,
      'POST',
      { ...as('alice'), 'content-type': 'application/json' },
      JSON.stringify(rpc('tools/list')),
    )
    const [entry] = (await h.audit()).slice(before)
    expect(entry.session_id).toBe('abc-123')
  })
})
