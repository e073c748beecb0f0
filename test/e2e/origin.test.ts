/**
 * Host, Origin and CORS: what a browser, a DNS-rebinding page and a forged proxy chain
 * get from a real gateway, and what the upstream behind it sees.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { type Harness, as, rpc, startHarness, toolCall } from '../helpers/harness'
import { type Reply, rawStatus, send } from '../helpers/http-client'
import { type RawUpstream, closedPort, startRawUpstream } from './raw-upstream'

const INSPECTOR = 'http://localhost:6274'
const JSON_POST = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
const EXPOSED = 'mcp-session-id, mcp-protocol-version, www-authenticate, retry-after, ratelimit, ratelimit-policy, x-wardline-request-id'

/** The upstream's own, looser CORS policy: the gateway's must replace it for a listed origin. */
const UPSTREAM_HEADERS = {
  'content-type': 'application/json',
  'mcp-session-id': 'session-from-upstream',
  'access-control-allow-origin': '*',
  'access-control-allow-credentials': 'true',
  vary: 'Accept-Encoding',
}

function expectCors(headers: IncomingHttpHeaders, origin = INSPECTOR): void {
  expect(headers['access-control-allow-origin']).toBe(origin)
  expect(headers.vary).toContain('Origin')
  expect(headers['access-control-expose-headers']).toBe(EXPOSED)
}

let upstream: RawUpstream
let h: Harness
let port: string
beforeAll(async () => {
  upstream = await startRawUpstream((req, res) => {
    res.writeHead(req.method === 'OPTIONS' ? 204 : 200, UPSTREAM_HEADERS)
    res.end(req.method === 'OPTIONS' ? undefined : JSON.stringify({ jsonrpc: '2.0', id: 1, result: {} }))
  })
  h = await startHarness({
    upstreamUrl: upstream.url,
    config: {
      allowed_origins: [INSPECTOR],
      // 127.0.0.1 without a port: the gateway's own port is 0 in config and only known once it listens.
      allowed_hosts: ['127.0.0.1', 'localhost:6277', '[::1]'],
      features: { budget_enforcement: true },
      budget: { requests_per_window: 1, window_seconds: 3600 },
      policy: { default: 'allow', rules: [{ identity: '*', tool: 'forbidden_tool', effect: 'deny' }] },
    },
  })
  port = new URL(h.url).port
})
afterAll(async () => {
  await h.close()
  await upstream.close()
})

/** Runs `act`, returning the audit entries and upstream requests it caused. */
async function observe(act: () => Promise<void>): Promise<{ entries: Awaited<ReturnType<Harness['audit']>>; reached: number }> {
  const entries = (await h.audit()).length
  const seen = upstream.seen.length
  await act()
  return { entries: (await h.audit()).slice(entries), reached: upstream.seen.length - seen }
}

describe('Host (allowed_hosts set)', () => {
  test.each([
    ['127.0.0.1:<port>', "an entry without a port accepts the gateway's port"],
    ['localhost:6277', 'an entry with a port'],
    ['[::1]:8080', 'an IPv6 literal in brackets'],
    ['LOCALHOST:6277', 'any case'],
  ])('Host %s reaches the upstream: %s', async (host) => {
    const res = await send(
      `${h.url}/mcp`,
      'POST',
      { ...as('host-ok'), ...JSON_POST, host: host.replace('<port>', port) },
      JSON.stringify(rpc('ping')),
    )
    expect(res.status).toBe(200)
  })

  test.each(['evil.example', 'localhost:8080', 'localhost', '127.0.0.1.nip.io'])(
    'Host %s (a DNS-rebinding page) gets 403, one audit entry, nothing upstream',
    async (host) => {
      let res!: Reply
      const { entries, reached } = await observe(async () => {
        res = await send(`${h.url}/mcp`, 'POST', { ...as('alice'), ...JSON_POST, host }, JSON.stringify(toolCall('echo')))
      })
      expect(res.status).toBe(403)
      expect(JSON.parse(res.body)).toEqual({ jsonrpc: '2.0', id: null, error: { code: 403, message: 'Forbidden: host not allowed' } })
      expect(res.headers['access-control-allow-origin']).toBeUndefined()
      expect(reached).toBe(0)
      expect(entries).toHaveLength(1)
      expect(entries[0]).toMatchObject({ decision: 'error', status: 403, reason: `host ${host} not in allowed_hosts` })
    },
  )

  test('no Host header (HTTP/1.0) gets 403; two Host headers get 400', async () => {
    expect(await rawStatus(Number(new URL(h.url).port), 'GET /mcp HTTP/1.0\r\nX-Wardline-Identity: alice\r\n\r\n')).toBe(403)
    expect(
      await rawStatus(
        Number(new URL(h.url).port),
        `GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nHost: evil.example\r\nX-Wardline-Identity: alice\r\n\r\n`,
      ),
    ).toBe(400)
  })

  test("the upstream sees the client's Host as X-Forwarded-Host (its own Host is the upstream's address)", async () => {
    await send(`${h.url}/mcp`, 'POST', { ...as('fwd-host'), ...JSON_POST, host: 'localhost:6277' }, JSON.stringify(rpc('ping')))
    const seen = upstream.seen.at(-1)!
    expect(seen.headers['x-forwarded-host']).toBe('localhost:6277')
    expect(seen.headers.host).toBe(new URL(upstream.url).host)
  })
})

describe('Origin', () => {
  test('no Origin (every non-browser client): forwarded, and the gateway adds no CORS header', async () => {
    const res = await send(`${h.url}/mcp`, 'POST', { ...as('no-origin'), ...JSON_POST }, JSON.stringify(rpc('ping')))
    expect(res.status).toBe(200)
    // The upstream's own headers pass as they are: nothing here is a CORS response.
    expect(res.headers['access-control-allow-origin']).toBe('*')
    expect(res.headers['access-control-expose-headers']).toBeUndefined()
    const refused = await send(`${h.url}/mcp`, 'POST', JSON_POST, JSON.stringify(rpc('ping')))
    expect(refused.status).toBe(401)
    expect(refused.headers['access-control-allow-origin']).toBeUndefined()
    expect(refused.headers.vary).toBeUndefined()
  })

  test("a listed origin gets a forwarded 200 with the gateway's CORS headers in place of the upstream's", async () => {
    const res = await send(`${h.url}/mcp`, 'POST', { ...as('browser'), ...JSON_POST, origin: INSPECTOR }, JSON.stringify(rpc('ping')))
    expect(res.status).toBe(200)
    expectCors(res.headers)
    expect(res.headers['access-control-allow-credentials']).toBeUndefined()
    expect(res.headers.vary).toBe('Accept-Encoding, Origin') // the upstream's Vary kept beside ours
    expect(res.headers['mcp-session-id']).toBe('session-from-upstream')
    expect(upstream.seen.at(-1)?.headers.origin).toBe(INSPECTOR) // forwarded: the upstream may check it too
  })

  test('a listed origin can read a 401 with its challenge', async () => {
    const res = await send(`${h.url}/mcp`, 'POST', { ...JSON_POST, origin: INSPECTOR }, JSON.stringify(rpc('initialize')))
    expect(res.status).toBe(401)
    expectCors(res.headers)
    expect(res.headers['www-authenticate']).toMatch(/^Bearer /)
    expect(res.headers['mcp-session-id']).toBeUndefined()
  })

  test('a listed origin can read a policy 403 and a 429 with its Retry-After', async () => {
    const denied = await send(
      `${h.url}/mcp`,
      'POST',
      { ...as('cors-deny'), ...JSON_POST, origin: INSPECTOR },
      JSON.stringify(toolCall('forbidden_tool')),
    )
    expect(denied.status).toBe(403)
    expectCors(denied.headers)
    expect(
      await send(`${h.url}/mcp`, 'POST', { ...as('cors-429'), ...JSON_POST, origin: INSPECTOR }, JSON.stringify(toolCall('echo'))),
    ).toMatchObject({ status: 200 })
    const throttled = await send(
      `${h.url}/mcp`,
      'POST',
      { ...as('cors-429'), ...JSON_POST, origin: INSPECTOR },
      JSON.stringify(toolCall('echo', {}, 2)),
    )
    expect(throttled.status).toBe(429)
    expectCors(throttled.headers)
    expect(Number(throttled.headers['retry-after'])).toBeGreaterThanOrEqual(1)
  })

  test.each([
    ['http://evil.example', 'a page on another origin'],
    ['http://localhost:6275', 'another port'],
    ['null', 'an opaque origin (sandboxed frame, file:)'],
  ])('Origin %s (%s) gets 403, no CORS headers, exactly one audit entry and nothing upstream', async (origin) => {
    let res!: Reply
    const { entries, reached } = await observe(async () => {
      res = await send(`${h.url}/mcp`, 'POST', { ...as('alice'), ...JSON_POST, origin }, JSON.stringify(toolCall('echo', {}, 'c-1')))
    })
    expect(res.status).toBe(403)
    expect(JSON.parse(res.body)).toEqual({ jsonrpc: '2.0', id: null, error: { code: 403, message: 'Forbidden: origin not allowed' } })
    expect(res.headers['access-control-allow-origin']).toBeUndefined()
    expect(res.headers['x-wardline-request-id']).toBe(entries[0]?.request_id)
    expect(reached).toBe(0)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      identity: '',
      method: 'POST',
      decision: 'error',
      status: 403,
      reason: `origin ${origin} not in allowed_origins`,
    })
  })
})

describe('a CORS preflight', () => {
  const PREFLIGHT = {
    origin: INSPECTOR,
    'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization,content-type,mcp-protocol-version',
  }

  test('from a listed origin is answered 204 by the gateway: nothing upstream, no session id, one audit entry', async () => {
    let res!: Reply
    const { entries, reached } = await observe(async () => {
      res = await send(`${h.url}/mcp`, 'OPTIONS', PREFLIGHT)
    })
    expect(res.status).toBe(204)
    expect(res.body).toBe('')
    expectCors(res.headers)
    expect(res.headers).toMatchObject({
      'access-control-allow-methods': 'GET, POST, DELETE, OPTIONS',
      'access-control-allow-headers': 'authorization, content-type, mcp-protocol-version',
      'access-control-max-age': '600',
    })
    expect(res.headers['mcp-session-id']).toBeUndefined()
    expect(res.headers['content-type']).toBeUndefined()
    expect(reached).toBe(0)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      request_id: res.headers['x-wardline-request-id'],
      identity: '',
      method: 'OPTIONS',
      decision: 'passthrough',
      status: 204,
      reason: 'CORS preflight answered by the gateway',
    })
  })

  test('from an unlisted origin gets 403; without Origin it is no preflight and needs a token', async () => {
    const { reached } = await observe(async () => {
      expect((await send(`${h.url}/mcp`, 'OPTIONS', { ...PREFLIGHT, origin: 'http://evil.example' })).status).toBe(403)
      const bare = await send(`${h.url}/mcp`, 'OPTIONS', { 'access-control-request-method': 'POST' })
      expect(bare.status).toBe(401)
      expect(bare.headers['access-control-allow-origin']).toBeUndefined()
    })
    expect(reached).toBe(0)
  })
})

describe('X-Forwarded-*', () => {
  const FORGED = {
    'x-forwarded-for': '203.0.113.9',
    'x-forwarded-host': 'forged.example',
    'x-forwarded-proto': 'https',
    x_forwarded_for: '203.0.113.10',
    forwarded: 'for=203.0.113.9',
  }

  test("from an untrusted peer the client's copies are replaced by what the gateway saw", async () => {
    await send(`${h.url}/mcp`, 'POST', { ...as('xff'), ...JSON_POST, ...FORGED, host: `127.0.0.1:${port}` }, JSON.stringify(rpc('ping')))
    const seen = upstream.seen.at(-1)!
    expect(seen.headers).toMatchObject({
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-host': `127.0.0.1:${port}`,
      'x-forwarded-proto': 'http',
    })
    expect(seen.headers.forwarded).toBeUndefined()
    expect(seen.rawHeaders.filter((name) => /^x[-_]forwarded[-_]for$/i.test(name))).toEqual(['x-forwarded-for'])
  })

  test('from a trusted proxy the incoming chain is kept and the proxy appended', async () => {
    const trusting = await startHarness({ upstreamUrl: upstream.url, config: { trusted_proxies: ['127.0.0.0/8'] } })
    try {
      await send(`${trusting.url}/mcp`, 'POST', { ...as('xff'), ...JSON_POST, ...FORGED }, JSON.stringify(rpc('ping')))
      const seen = upstream.seen.at(-1)!
      expect(seen.headers).toMatchObject({
        'x-forwarded-for': '203.0.113.9, 127.0.0.1',
        'x-forwarded-host': 'forged.example',
        'x-forwarded-proto': 'https',
        forwarded: 'for=203.0.113.9',
      })
      expect(seen.rawHeaders.filter((name) => /^x[-_]forwarded[-_]for$/i.test(name))).toEqual(['x-forwarded-for'])
    } finally {
      await trusting.close()
    }
  })
})

test('a failure the gateway answers itself (502, upstream unreachable) carries CORS for a listed origin', async () => {
  const down = await startHarness({ upstreamUrl: `http://127.0.0.1:${await closedPort()}`, config: { allowed_origins: [INSPECTOR] } })
  try {
    const res = await send(`${down.url}/mcp`, 'POST', { ...as('alice'), ...JSON_POST, origin: INSPECTOR }, JSON.stringify(rpc('ping')))
    expect(res.status).toBe(502)
    expectCors(res.headers)
  } finally {
    await down.close()
  }
})
