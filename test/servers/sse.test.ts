/**
 * `transport: sse` servers (the HTTP+SSE transport of MCP 2024-11-05) behind the router: the official
 * SDK's SSEClientTransport at /mcp/<name>, the endpoint event rewritten so every POST comes back
 * through that server's route and no other, an endpoint the gateway cannot route ending the stream,
 * refusals answered as tool results on the stream, and sessions scoped by server.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ExampleServer } from '../../examples/mcp-server'
import { AnswerRefused } from '../../src/pipeline/answer'
import { routedEndpoint } from '../../src/server/legacy-endpoint'
import { MCP_HEADERS, as, metricSamples, rpc, toolCall } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { waitFor } from '../helpers/wait'

const ALICE = as('alice')
const MALLORY = as('mallory')

interface ToolResult {
  content: Array<{ type: string; text: string }>
  isError?: boolean
}

function textOf(result: unknown): string {
  return (result as ToolResult).content[0].text
}

/** What a caller sent to an example server (its health probe's requests carry no identity). */
function fromCallers(server: ExampleServer): ExampleServer['seen'] {
  return server.seen.filter((r) => r.headers['x-wardline-identity'] !== undefined)
}

/** Everything a stream sent until it ended or was cut. */
function received(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = ''
    res.on('data', (c: Buffer) => (text += c.toString('utf8')))
    res.on('close', () => resolve(text))
  })
}

/** The SDK's legacy client connected through the gateway at /mcp/<name>. */
async function legacyClient(h: ServersHarness, name: string, headers = ALICE): Promise<{ client: Client; transport: SSEClientTransport }> {
  const transport = new SSEClientTransport(new URL(`${h.url}/mcp/${name}`), { requestInit: { headers } })
  const client = new Client({ name: 'legacy', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

/** A raw GET stream through the gateway: its response, its first event's data, and the bytes read so far. */
async function firstEvent(url: string, headers = ALICE): Promise<{ res: IncomingMessage; data: string; abort: () => void }> {
  const controller = new AbortController()
  const res = await open(url, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal })
  let text = ''
  const data = await new Promise<string>((resolve, reject) => {
    res.on('data', (c: Buffer) => {
      text += c.toString('utf8')
      const end = text.indexOf('\n\n')
      if (end < 0) return
      const line = text
        .slice(0, end)
        .split('\n')
        .find((l) => l.startsWith('data: '))
      resolve(line === undefined ? '' : line.slice(6))
    })
    res.on('error', reject)
    res.on('end', () => reject(new Error(`stream ended before an event: ${JSON.stringify(text)}`)))
  })
  return { res, data, abort: () => controller.abort() }
}

describe('routedEndpoint: what a client is told to POST to', () => {
  const server = new URL('http://127.0.0.1:3002/sse')
  test.each([
    ['/messages?sessionId=abc', '/mcp/t/messages?sessionId=abc'],
    ['/messages/?session_id=0f1e', '/mcp/t/messages/?session_id=0f1e'],
    ['messages?sessionId=abc', '/mcp/t/messages?sessionId=abc'],
    ['http://127.0.0.1:3002/messages?sessionId=abc#frag', '/mcp/t/messages?sessionId=abc'],
    ['/base/a/../messages?sessionId=abc', '/mcp/t/base/messages?sessionId=abc'],
    ['{"jsonrpc":"2.0","method":"ping"}', '{"jsonrpc":"2.0","method":"ping"}'],
    [' [{"jsonrpc":"2.0","id":1,"result":{}}]', ' [{"jsonrpc":"2.0","id":1,"result":{}}]'],
    ['', ''],
  ])('%s → %s', (data, expected) => expect(routedEndpoint(data, server, '/mcp/t')).toBe(expected))

  test.each([
    ['http://127.0.0.1:9/messages?sessionId=abc', /another origin/],
    ['https://127.0.0.1:3002/messages?sessionId=abc', /another origin/],
    ['//127.0.0.2:3002/messages', /another origin/],
    ['javascript:alert(1)', /another origin/],
    ['/a%2Fb/messages?sessionId=abc', /does not route/],
    ['/messages%2F..%2Fadmin', /does not route/],
    ['/', /does not route/],
    ['http://[::1', /names no URL/],
  ])('%s is refused', (data, why) => {
    expect(() => routedEndpoint(data, server, '/mcp/t')).toThrow(AnswerRefused)
    expect(() => routedEndpoint(data, server, '/mcp/t')).toThrow(why)
  })
})

describe('legacy (sse) servers behind the router', () => {
  let h: ServersHarness
  beforeAll(async () => {
    h = await startServersHarness(
      { legacy: { transport: 'sse' }, tickets: { transport: 'sse' }, docs: {} },
      {
        default_server: 'legacy',
        tool_refusals: 'result',
        policy: { default: 'allow', rules: [{ identity: 'alice', tool: 'add', effect: 'deny' }] },
      },
    )
  })
  afterAll(() => h.close())

  test('the SDK client lists and calls tools at /mcp/<name>; every request reaches that server only', async () => {
    const before = { tickets: fromCallers(h.upstreams.tickets).length, docs: fromCallers(h.upstreams.docs).length }
    const { client } = await legacyClient(h, 'legacy')
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo')
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'through the router' } }))).toBe('through the router')
    await client.close()

    const seen = fromCallers(h.upstreams.legacy)
    expect(seen.filter((r) => r.method === 'GET').map((r) => r.url)).toEqual(['/sse'])
    const posts = seen.filter((r) => r.method === 'POST')
    expect(posts.length).toBeGreaterThanOrEqual(3) // initialize, its notification, tools/list, tools/call
    const sessionId = new URL(posts[0].url, 'http://x').searchParams.get('sessionId')
    expect(posts.every((r) => r.url === `/messages?sessionId=${sessionId}`)).toBe(true)
    expect({ tickets: fromCallers(h.upstreams.tickets).length, docs: fromCallers(h.upstreams.docs).length }).toEqual(before)

    await waitFor(async () => (await h.audit()).some((e) => e.method === 'GET' && e.identity === 'alice'), {
      what: 'the audit entry of the closed stream',
    })
    const mine = (await h.audit()).filter((e) => e.session_id === sessionId)
    expect(mine.find((e) => e.method === 'tools/call')).toMatchObject({ tool: 'echo', decision: 'allow', status: 202 })
  })

  test('the endpoint event points at /mcp/<name>; POSTs of that session elsewhere never reach its server', async () => {
    const stream = await firstEvent(`${h.url}/mcp/legacy`)
    try {
      expect(stream.data).toMatch(/^\/mcp\/legacy\/messages\?sessionId=[0-9a-f-]{36}$/)
      const sessionId = new URL(stream.data, 'http://x').searchParams.get('sessionId') as string
      const posted = (): number => h.upstreams.legacy.seen.filter((r) => r.method === 'POST').length
      const before = posted()
      const body = JSON.stringify(toolCall('echo', { text: 'elsewhere' }))

      // Another legacy server: the path exists there, the session does not (its own 404).
      const other = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, body, `/mcp/tickets/messages?sessionId=${sessionId}`)
      expect(other.status).toBe(404)
      expect(other.body).toBe('unknown session')
      expect(h.upstreams.tickets.seen.at(-1)?.url).toBe(`/messages?sessionId=${sessionId}`)
      // A streamable server has no paths below its name.
      const streamable = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, body, `/mcp/docs/messages?sessionId=${sessionId}`)
      expect(streamable.status).toBe(404)
      expect(JSON.parse(streamable.body)).toMatchObject({ jsonrpc: '2.0', error: { code: 404 } })
      // Another caller at the right server: the session is Alice's.
      const stranger = await send(h.url, 'POST', { ...MCP_HEADERS, ...MALLORY }, body, `/mcp/legacy/messages?sessionId=${sessionId}`)
      expect(stranger.status).toBe(404)
      expect(posted()).toBe(before)

      const ids = [other, streamable, stranger].map((r) => r.headers['x-wardline-request-id'])
      const entries = (await h.audit()).filter((e) => ids.includes(e.request_id))
      const byId = new Map(entries.map((e) => [e.request_id, [e.decision, e.status, e.reason_code ?? null]]))
      expect(ids.map((id) => byId.get(id as string))).toEqual([
        ['allow', 404, null],
        ['error', 404, 'route.unknown_server'],
        ['deny', 404, 'session.not_owner'],
      ])

      // The owner's POST at the path it was given reaches its server.
      const mine = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, JSON.stringify(rpc('ping')), stream.data)
      expect(mine.status).toBe(202)
      expect(posted()).toBe(before + 1)
    } finally {
      stream.abort()
    }
  })

  test('the default server’s stream at /mcp names its endpoint below /mcp/<name>, where the router finds it', async () => {
    const stream = await firstEvent(`${h.url}/mcp`)
    try {
      expect(stream.data).toMatch(/^\/mcp\/legacy\/messages\?sessionId=[0-9a-f-]{36}$/)
      const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, JSON.stringify(rpc('ping')), stream.data)
      expect(reply.status).toBe(202)
    } finally {
      stream.abort()
    }
  })

  test('tool_refusals: result: a denied call through /mcp/<name>/messages is answered on that session’s stream', async () => {
    const { client } = await legacyClient(h, 'legacy')
    const posts = (): number => h.upstreams.legacy.seen.filter((r) => r.method === 'POST').length
    const before = posts()
    const denied = (await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } })) as ToolResult
    expect(denied.isError).toBe(true)
    expect(denied.content[0].text).toContain('"add" is not allowed')
    expect(posts()).toBe(before)
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'still here' } }))).toBe('still here')
    await client.close()
    const entry = (await h.audit()).filter((e) => e.method === 'tools/call' && e.tool === 'add').at(-1)
    expect(entry).toMatchObject({ decision: 'deny', status: 202, reason_code: 'policy.denied' })
  })

  test('a streamable client and a legacy client at once, on two servers', async () => {
    const streamable = new Client({ name: 'streamable', version: '1.0.0' })
    const [legacy] = await Promise.all([
      legacyClient(h, 'tickets', as('bob')),
      streamable.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp/docs`), { requestInit: { headers: as('bob') } })),
    ])
    const texts = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        (i % 2 === 0 ? legacy.client : streamable).callTool({ name: 'echo', arguments: { text: `call ${i}` } }).then(textOf),
      ),
    )
    expect(texts).toEqual(['call 0', 'call 1', 'call 2', 'call 3'])
    await Promise.all([legacy.client.close(), streamable.close()])
    const calls = (await h.audit()).filter((e) => e.identity === 'bob' && e.method === 'tools/call')
    expect(calls.map((e) => e.status).sort()).toEqual([200, 200, 202, 202])
    const bob = (server: ExampleServer): string[] =>
      server.seen.filter((r) => r.headers['x-wardline-identity'] === 'bob' && r.method === 'POST').map((r) => r.url)
    expect(new Set(bob(h.upstreams.docs))).toEqual(new Set(['/mcp']))
    expect(bob(h.upstreams.tickets).every((url) => url.startsWith('/messages?sessionId='))).toBe(true)
    expect(bob(h.upstreams.legacy)).toEqual([])
  })
})

/**
 * A legacy server that names whatever endpoints a test gives it (`{port}` is its own port) and
 * records the POSTs it gets, answering each 202.
 */
async function scriptedSseServer(endpoints: readonly string[]): Promise<{ url: string; posts: string[]; close: () => Promise<void> }> {
  const posts: string[] = []
  const streams = new Set<ServerResponse>()
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'POST') {
      posts.push(req.url ?? '')
      return void res.writeHead(202).end('Accepted')
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    streams.add(res)
    res.on('close', () => streams.delete(res))
    const port = (server.address() as AddressInfo).port
    // One event at a time, as a server sends them: each reaches the gateway on its own.
    endpoints.forEach((endpoint, i) =>
      setTimeout(() => res.write(`event: endpoint\ndata: ${endpoint.replaceAll('{port}', String(port))}\n\n`), 50 * i),
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/sse`,
    posts,
    close: async () => {
      for (const res of streams) res.destroy()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

describe('a legacy server whose endpoint the gateway cannot route', () => {
  const cases = [
    ['another origin', ['http://127.0.0.1:1/messages?sessionId=abc'], /another origin/],
    ['a percent-encoded path', ['/a%2F..%2Fb/messages?sessionId=abc'], /does not route/],
    [
      'another origin in a later endpoint event',
      ['/messages?sessionId=abc', 'http://127.0.0.1:1/messages?sessionId=abc'],
      /another origin/,
    ],
  ] as const
  test.each(cases)('%s: the stream is ended, audited upstream.failed, and no such URL reaches the client', async (_, endpoints, why) => {
    const upstream = await scriptedSseServer(endpoints)
    const h = await startServersHarness({ odd: { transport: 'sse', url: upstream.url } })
    try {
      const res = await open(`${h.url}/mcp/odd`, { headers: { accept: 'text/event-stream', ...ALICE } })
      expect(res.statusCode).toBe(200)
      const body = await received(res)
      expect(body).not.toContain('127.0.0.1:1')
      expect(body).not.toContain('%2F')
      if (endpoints.length > 1) expect(body).toContain('data: /mcp/odd/messages?sessionId=abc')
      const entry = await waitFor(async () => (await h.audit()).find((e) => e.method === 'GET'), { what: 'the stream’s audit entry' })
      expect(entry).toMatchObject({ decision: 'error', reason_code: 'upstream.failed' })
      expect(entry.reason).toMatch(/^upstream answer refused: the endpoint event names /)
      expect(entry.reason).toMatch(why)
      // Counted as the server's bad answer, whatever other labels the series carries.
      const metrics = await (await fetch(`${h.url}/metrics`)).text()
      const bad = metricSamples(metrics, 'wardline_upstream_errors_total').filter((s) => s.labels.kind === 'bad_response')
      expect(bad.reduce((n, s) => n + s.value, 0)).toBe(1)
    } finally {
      await h.close()
      await upstream.close()
    }
  })

  test('an absolute endpoint on the server’s own origin is rewritten and reached through the gateway', async () => {
    const upstream = await scriptedSseServer(['http://127.0.0.1:{port}/rpc/messages?sessionId=abc'])
    const h = await startServersHarness({ odd: { transport: 'sse', url: upstream.url } })
    try {
      const stream = await firstEvent(`${h.url}/mcp/odd`)
      expect(stream.data).toBe('/mcp/odd/rpc/messages?sessionId=abc')
      const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, JSON.stringify(rpc('ping')), stream.data)
      expect(reply.status).toBe(202)
      expect(upstream.posts).toEqual(['/rpc/messages?sessionId=abc'])
      stream.abort()
    } finally {
      await h.close()
      await upstream.close()
    }
  })
})

/** A Streamable HTTP server that gives every session the same id, as two unrelated servers may: it answers any call. */
async function sameIdServer(): Promise<{ url: string; seen: Array<{ identity: unknown; session: unknown }>; close: () => Promise<void> }> {
  const seen: Array<{ identity: unknown; session: unknown }> = []
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString('utf8')))
    req.on('end', () => {
      // The gateway's health probe (a GET): nothing to record.
      if (req.method !== 'POST') return void res.writeHead(405).end()
      seen.push({ identity: req.headers['x-wardline-identity'], session: req.headers['mcp-session-id'] })
      const message = JSON.parse(body) as { id?: number; method: string }
      if (message.id === undefined) return void res.writeHead(202).end()
      const result =
        message.method === 'initialize'
          ? { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'same-id', version: '1' } }
          : { tools: [] }
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'the-same-session' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}/mcp`, seen, close: () => new Promise((resolve) => server.close(() => resolve())) }
}

describe('sessions are bound per server', () => {
  test('the same session id at two servers: each keeps its own owner, neither is made shared by the other', async () => {
    const a = await sameIdServer()
    const b = await sameIdServer()
    const h = await startServersHarness({ a: { url: a.url }, b: { url: b.url } })
    const initialize = JSON.stringify(
      rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } }),
    )
    const list = JSON.stringify(rpc('tools/list', {}, 2))
    const withSession = (who: Record<string, string>) => ({ ...MCP_HEADERS, ...who, 'mcp-session-id': 'the-same-session' })
    try {
      expect((await send(`${h.url}/mcp/a`, 'POST', { ...MCP_HEADERS, ...ALICE }, initialize)).status).toBe(200)
      // Mallory's session at b has the same id: hers there, and no claim on Alice's at a.
      expect((await send(`${h.url}/mcp/b`, 'POST', { ...MCP_HEADERS, ...MALLORY }, initialize)).status).toBe(200)
      expect((await send(`${h.url}/mcp/b`, 'POST', withSession(MALLORY), list)).status).toBe(200)
      const intruder = await send(`${h.url}/mcp/a`, 'POST', withSession(MALLORY), list)
      expect(intruder.status).toBe(404)
      expect((await send(`${h.url}/mcp/b`, 'POST', withSession(ALICE), list)).status).toBe(404)
      expect((await send(`${h.url}/mcp/a`, 'POST', withSession(ALICE), list)).status).toBe(200)
      expect(a.seen.map((s) => s.identity)).toEqual(['alice', 'alice'])
      expect(b.seen.map((s) => s.identity)).toEqual(['mallory', 'mallory'])
      const entry = (await h.audit()).find((e) => e.request_id === intruder.headers['x-wardline-request-id'])
      expect(entry).toMatchObject({ decision: 'deny', reason_code: 'session.not_owner' })
    } finally {
      await h.close()
      await Promise.all([a.close(), b.close()])
    }
  })
})
