/**
 * The official MCP SDK client, through a real gateway, to the official-SDK example server: every
 * transport and server mode the gateway must carry unchanged.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ExampleMode } from '../../examples/mcp-server'
import { type Harness, as, startHarness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

function textOf(result: unknown): string {
  const content = (result as { content: Array<{ type: string; text: string }> }).content
  return content[0].text
}

/** Identity headers plus a bearer token the upstream must never see. */
const CALLER = { ...as('alice', 'acme'), authorization: 'Bearer client-secret-token' }

async function connect(h: Harness): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: CALLER } })
  const client = new Client({ name: 'e2e', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

describe.each<ExampleMode>(['stateless-json', 'stateless-sse', 'stateful'])('Streamable HTTP through the gateway (%s upstream)', (mode) => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode })
  })
  afterEach(async () => {
    await h.close()
  })

  test('initialize, tools/list and tools/call reach the server and come back unchanged', async () => {
    const { client } = await connect(h)
    expect(client.getServerVersion()).toEqual({ name: 'wardline-example', version: '1.0.0' })
    const tools = await client.listTools()
    expect(tools.tools.map((t) => t.name).sort()).toEqual(['add', 'count_slowly', 'echo', 'expensive_tool', 'whoami'])
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'hello through wardline' } }))).toBe('hello through wardline')
    expect(textOf(await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } }))).toBe('42')
    await client.close()

    const entries = await h.audit()
    const calls = entries.filter((e) => e.method === 'tools/call')
    expect(calls.map((e) => [e.tool, e.decision, e.status, e.identity, e.tenant])).toEqual([
      ['echo', 'allow', 200, 'alice', 'acme'],
      ['add', 'allow', 200, 'alice', 'acme'],
    ])
    expect(entries.find((e) => e.method === 'initialize')).toMatchObject({ decision: 'passthrough', status: 200 })
    expect(entries.find((e) => e.method === 'tools/list')).toMatchObject({ decision: 'passthrough', status: 200 })
  })

  test("the upstream sees the verified identity and never the caller's Authorization header", async () => {
    const { client } = await connect(h)
    const seen = JSON.parse(textOf(await client.callTool({ name: 'whoami', arguments: {} }))) as unknown
    expect(seen).toEqual({ identity: 'alice', tenant: 'acme', authorization: null })
    await client.close()
    expect(h.upstream.seen.length).toBeGreaterThan(0)
    for (const r of h.upstream.seen) expect(r.headers.authorization).toBeUndefined()
  })
})

describe.each<ExampleMode>(['stateless-sse', 'stateful'])('progress notifications through the gateway (%s upstream)', (mode) => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode })
  })
  afterEach(async () => {
    await h.close()
  })

  test('every progress notification arrives before the tool result', async () => {
    const { client } = await connect(h)
    const events: string[] = []
    const result = client
      .callTool({ name: 'count_slowly', arguments: { n: 3, delay_ms: 30 } }, undefined, {
        onprogress: (p) => void events.push(`progress ${p.progress}/${p.total}`),
      })
      .then((r) => {
        events.push('result')
        return r
      })
    expect(textOf(await result)).toBe('counted to 3')
    expect(events).toEqual(['progress 1/3', 'progress 2/3', 'progress 3/3', 'result'])
    await client.close()
  })
})

describe('sessions through the gateway (stateful upstream)', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateful' })
  })
  afterEach(async () => {
    await h.close()
  })

  test('the Mcp-Session-Id the server assigns round-trips on every later request and lands in the audit trail', async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/)
    await client.listTools()
    await client.close()

    const later = h.upstream.seen.filter((r) => r.method === 'POST').slice(1)
    expect(later.length).toBeGreaterThanOrEqual(2) // notifications/initialized, tools/list
    for (const r of later) expect(r.headers['mcp-session-id']).toBe(sessionId)
    const entries = await h.audit()
    expect(entries.find((e) => e.method === 'initialize')?.session_id).toBeUndefined()
    expect(entries.find((e) => e.method === 'tools/list')?.session_id).toBe(sessionId)
    expect(entries.find((e) => e.method === 'notifications/initialized')).toMatchObject({
      decision: 'passthrough',
      status: 202,
      session_id: sessionId,
    })
  })

  test('the client opens the standalone GET stream through the gateway and it stays open until the client leaves', async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId
    // The SDK opens the GET stream right after initialization, without waiting for it.
    // A GET of /mcp: the gateway's own health probe is a GET of / (upstream_health_check).
    const isStream = (r: { method: string; url: string }): boolean => r.method === 'GET' && r.url === '/mcp'
    await waitFor(() => h.upstream.seen.some(isStream), { what: 'the GET stream to reach the upstream' })
    const get = h.upstream.seen.find(isStream)
    expect(get?.url).toBe('/mcp')
    expect(get?.headers.accept).toContain('text/event-stream')
    expect(get?.headers['mcp-session-id']).toBe(sessionId)
    // Still open: no audit entry for it until the stream ends.
    expect((await h.audit()).filter((e) => e.method === 'GET')).toEqual([])
    await client.close()
    await waitFor(async () => (await h.audit()).some((e) => e.method === 'GET'), { what: 'the audit entry of the closed GET stream' })
    expect((await h.audit()).filter((e) => e.method === 'GET')).toEqual([
      expect.objectContaining({ decision: 'passthrough', status: 200, session_id: sessionId }),
    ])
  })

  test('terminateSession sends DELETE through the gateway and the server ends the session', async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId
    await transport.terminateSession()
    expect(transport.sessionId).toBeUndefined()
    const del = h.upstream.seen.filter((r) => r.method === 'DELETE')
    expect(del).toHaveLength(1)
    expect(del[0].headers['mcp-session-id']).toBe(sessionId)

    // The session is gone upstream: a request with the old id gets the server's own 404, forwarded as is.
    const res = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: {
        ...as('alice'),
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId ?? '',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    })
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ error: { code: -32001, message: 'Session not found' } })
    await client.close()
    const entries = await h.audit()
    expect(entries.filter((e) => e.method === 'DELETE')).toEqual([
      expect.objectContaining({ decision: 'passthrough', status: 200, session_id: sessionId }),
    ])
  })
})

describe('legacy HTTP+SSE transport through the gateway', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateful' })
  })
  afterEach(async () => {
    await h.close()
  })

  test('the SSE client connects with GET /sse, posts to /messages?sessionId= and gets its results on the stream', async () => {
    const transport = new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers: CALLER } })
    const client = new Client({ name: 'legacy', version: '1.0.0' })
    await client.connect(transport)
    expect((await client.listTools()).tools.length).toBe(5)
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'old transport' } }))).toBe('old transport')
    const who = JSON.parse(textOf(await client.callTool({ name: 'whoami', arguments: {} }))) as unknown
    expect(who).toEqual({ identity: 'alice', tenant: 'acme', authorization: null })
    await client.close()

    const posts = h.upstream.seen.filter((r) => r.method === 'POST')
    expect(posts.length).toBeGreaterThanOrEqual(4)
    const sessionId = new URL(posts[0].url, 'http://x').searchParams.get('sessionId')
    expect(posts.every((r) => r.url === `/messages?sessionId=${sessionId}`)).toBe(true)

    await waitFor(async () => (await h.audit()).some((e) => e.method === 'GET'), { what: 'the audit entry of the closed SSE stream' })
    const entries = await h.audit()
    expect(entries.filter((e) => e.method === 'tools/call').map((e) => [e.tool, e.decision, e.status, e.session_id])).toEqual([
      ['echo', 'allow', 202, sessionId],
      ['whoami', 'allow', 202, sessionId],
    ])
    expect(entries.filter((e) => e.method === 'GET')).toEqual([expect.objectContaining({ decision: 'passthrough', status: 200 })])
  })
})
