/**
 * Every response the gateway makes itself: its status, its JSON-RPC body, that nothing reached the
 * upstream, and the one audit entry it leaves.
 */
import { request } from 'node:http'
import { type Harness, MCP_HEADERS, as, rpc, startHarness } from '../helpers/harness'

let h: Harness
beforeAll(async () => {
  h = await startHarness({ mode: 'stateless-json', config: { max_body_bytes: 1024 } })
})
afterAll(async () => {
  await h.close()
})

const HEADERS = { ...as('alice'), ...MCP_HEADERS }

async function post(body: string, headers: Record<string, string> = HEADERS): Promise<{ status: number; headers: Headers; json: unknown }> {
  const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers, body })
  return { status: res.status, headers: res.headers, json: await res.json() }
}

/** Runs `act`, then returns the audit entries it added and how many requests reached the upstream. */
async function observe(act: () => Promise<void>): Promise<{ entries: Awaited<ReturnType<Harness['audit']>>; upstreamRequests: number }> {
  const before = (await h.audit()).length
  const seenBefore = h.upstream.seen.length
  await act()
  return { entries: (await h.audit()).slice(before), upstreamRequests: h.upstream.seen.length - seenBefore }
}

describe('requests the gateway refuses itself', () => {
  test('a declared Content-Length over max_body_bytes is a 413 before the body is read', async () => {
    let res!: Awaited<ReturnType<typeof post>>
    const { entries, upstreamRequests } = await observe(async () => {
      res = await post(
        JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x'.repeat(2000) } } }),
      )
    })
    expect(res.status).toBe(413)
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: 413, message: 'Request body too large', data: { max_body_bytes: 1024 } },
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({ method: 'POST', decision: 'error', status: 413, reason: 'request body larger than max_body_bytes (1024)' }),
    ])
  })

  test('a chunked body that grows past max_body_bytes is a 413 too', async () => {
    let status = 0
    let body = ''
    const { entries, upstreamRequests } = await observe(async () => {
      await new Promise<void>((resolve, reject) => {
        const req = request(`${h.url}/mcp`, { method: 'POST', headers: HEADERS }, (res) => {
          status = res.statusCode ?? 0
          res.on('data', (c: Buffer) => (body += c.toString()))
          res.on('end', resolve)
        })
        req.on('error', reject)
        // No Content-Length: node sends it chunked, so the cap is only seen while reading.
        req.write(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"${'y'.repeat(600)}`)
        req.write('y'.repeat(600))
        req.end('"}}}')
      })
    })
    expect(status).toBe(413)
    expect(JSON.parse(body)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: 413 } })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([expect.objectContaining({ decision: 'error', status: 413 })])
  })

  test('malformed JSON is a 400 parse error with id null', async () => {
    const { entries, upstreamRequests } = await observe(async () => {
      const res = await post('{"jsonrpc":"2.0","id":4,')
      expect(res.status).toBe(400)
      expect(res.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } })
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([expect.objectContaining({ method: 'POST', decision: 'error', status: 400 })])
    expect(entries[0].reason).toMatch(/^malformed JSON/)
  })

  test('an invalid envelope is a 400 invalid request that echoes the id it could read', async () => {
    const res = await post(JSON.stringify({ jsonrpc: '1.0', id: 'req-5', method: 'tools/list' }))
    expect(res.status).toBe(400)
    expect(res.json).toEqual({ jsonrpc: '2.0', id: 'req-5', error: { code: -32600, message: 'Invalid Request' } })
  })

  test('tools/call without a params.name string is an invalid request', async () => {
    for (const params of [{}, { name: '' }, { name: 42 }]) {
      const { entries, upstreamRequests } = await observe(async () => {
        const res = await post(JSON.stringify(rpc('tools/call', params, 3)))
        expect(res.status).toBe(400)
        expect(res.json).toEqual({ jsonrpc: '2.0', id: 3, error: { code: -32600, message: 'Invalid Request' } })
      })
      expect(upstreamRequests).toBe(0)
      expect(entries).toEqual([
        expect.objectContaining({ decision: 'error', status: 400, reason: 'tools/call needs params.name as a non-empty string' }),
      ])
    }
  })

  test('an invalid batch element makes the whole batch a 400 with id null', async () => {
    const res = await post(JSON.stringify([rpc('tools/list', undefined, 1), { jsonrpc: '2.0', id: 2 }]))
    expect(res.status).toBe(400)
    expect(res.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request' } })
  })

  test('PUT is a 405 naming the methods that are forwarded', async () => {
    const { entries, upstreamRequests } = await observe(async () => {
      const res = await fetch(`${h.url}/mcp`, { method: 'PUT', headers: HEADERS, body: '{}' })
      expect(res.status).toBe(405)
      expect(res.headers.get('allow')).toBe('GET, POST, DELETE, HEAD, OPTIONS')
      expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 405, message: 'Method not allowed' } })
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([expect.objectContaining({ method: 'PUT', decision: 'error', status: 405 })])
  })

  test('a gzip-encoded body is a 415: a body the gateway cannot read must not pass its gates', async () => {
    const { entries, upstreamRequests } = await observe(async () => {
      const res = await post('\x1f\x8b compressed', { ...HEADERS, 'content-encoding': 'gzip' })
      expect(res.status).toBe(415)
      expect(res.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: 415, message: 'Compressed request bodies are not supported' } })
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([expect.objectContaining({ decision: 'error', status: 415, reason: 'content-encoding gzip is not supported' })])
  })

  test('a body declared in a charset other than UTF-8 is a 415: the upstream would read another tool name than the gates judged', async () => {
    // In UTF-7, +ACI- is a quote: judged as UTF-8 this calls "echo+ACI-,…"; decoded as UTF-7, expensive_tool.
    const smuggled = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo+ACI-,+ACI-name+ACI-:+ACI-expensive_tool"}}'
    const { entries, upstreamRequests } = await observe(async () => {
      // The SDK's parser takes the last of two charset parameters: any foreign one refuses the body.
      for (const type of [
        'application/json; charset=utf-7',
        'application/json;charset="UTF-16"',
        'application/json; charset=utf-8; charset=utf-7',
      ]) {
        const res = await post(smuggled, { ...HEADERS, 'content-type': type })
        expect(res.status).toBe(415)
        expect(res.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: 415, message: 'Request bodies must be UTF-8' } })
      }
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({ decision: 'error', status: 415, reason: 'content-type charset utf-7 is not supported' }),
      expect.objectContaining({ decision: 'error', status: 415, reason: 'content-type charset utf-16 is not supported' }),
      expect.objectContaining({ decision: 'error', status: 415, reason: 'content-type charset utf-7 is not supported' }),
    ])
    for (const type of ['application/json; charset=utf-8', 'application/json; charset="UTF-8"', 'application/json']) {
      expect((await post(JSON.stringify(rpc('tools/list')), { ...HEADERS, 'content-type': type })).status).toBe(200)
    }
  })

  test('a request without an identity (header auth) is a 401 audited as unauthorized', async () => {
    const { entries, upstreamRequests } = await observe(async () => {
      const res = await post(JSON.stringify(rpc('tools/list')), MCP_HEADERS)
      expect(res.status).toBe(401)
      expect(res.headers.get('www-authenticate')).toBe('Bearer realm="wardline"')
      expect(res.json).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: 401 } })
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([expect.objectContaining({ identity: '', decision: 'unauthorized', status: 401 })])
  })

  test('no refusal carries an Mcp-Session-Id, even when the request did', async () => {
    const res = await post('nonsense', { ...HEADERS, 'mcp-session-id': 'abc' })
    expect(res.status).toBe(400)
    expect(res.headers.get('mcp-session-id')).toBeNull()
  })
})

describe("the gateway's own endpoints", () => {
  test('/healthz, /readyz and /metrics answer locally: never proxied, never audited', async () => {
    const { entries, upstreamRequests } = await observe(async () => {
      const health = await fetch(`${h.url}/healthz`)
      expect(health.status).toBe(200)
      expect(await health.json()).toEqual({ status: 'ok' })
      const ready = await fetch(`${h.url}/readyz?verbose=1`)
      expect(ready.status).toBe(200)
      expect(await ready.json()).toMatchObject({ status: 'ready' })
      const metrics = await fetch(`${h.url}/metrics`)
      expect(metrics.status).toBe(200)
      expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/)
      expect(await metrics.text()).toMatch(/^wardline_requests_total\{decision="error"\} \d+$/m)
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([])
  })
})
