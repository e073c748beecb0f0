/**
 * A session belongs to the principal that created it. The official SDK client (A)
 * opens a session through a real gateway to the SDK example server (stateful, sessions); a caller of
 * another tenant (B) who knows the id gets 404 on every use of it, audited, while A keeps working.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { AuditEntry } from '../../src/audit/entry'
import { type Harness, MCP_HEADERS, as, metricSample, startHarness, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const ALICE = as('alice', 'acme')
const MALLORY = as('mallory', 'evil')

function textOf(result: unknown): string {
  return (result as { content: Array<{ text: string }> }).content[0].text
}

async function connect(h: Harness, headers = ALICE): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers } })
  const client = new Client({ name: 'owner', version: '1.0.0' })
  await client.connect(transport)
  return { client, transport }
}

/** A's session id used by `caller` with `method`: the raw answer, as any HTTP client sees it. */
async function present(h: Harness, method: 'POST' | 'GET' | 'DELETE', sessionId: string, caller = MALLORY): Promise<Response> {
  const headers = { ...MCP_HEADERS, ...caller, 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' }
  if (method === 'GET') return fetch(`${h.url}/mcp`, { method, headers: { ...headers, accept: 'text/event-stream' } })
  if (method === 'DELETE') return fetch(`${h.url}/mcp`, { method, headers })
  return fetch(`${h.url}/mcp`, { method, headers, body: JSON.stringify(toolCall('echo', { text: 'hijacked' }, 7)) })
}

/** A session opened without the SDK client, so without its standalone GET stream: only requests use it. */
async function initializeRaw(h: Harness, caller = ALICE): Promise<string> {
  const params = { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } }
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...caller },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params }),
  })
  expect(res.status).toBe(200)
  await res.text()
  const sessionId = res.headers.get('mcp-session-id') as string
  const headers = { ...MCP_HEADERS, ...caller, 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' }
  const initialized = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  })
  expect(initialized.status).toBe(202)
  return sessionId
}

async function entriesOf(h: Harness, identity: string, count: number): Promise<AuditEntry[]> {
  return waitFor(
    async () => {
      const found = (await h.audit()).filter((e) => e.identity === identity)
      return found.length >= count && found
    },
    { what: `${count} audit entries of ${identity}` },
  )
}

describe('sessions are bound to the principal that created them (Streamable HTTP, stateful SDK upstream)', () => {
  let h: Harness
  let now: number
  beforeEach(async () => {
    now = 1_000_000
    h = await startHarness({ mode: 'stateful', config: { session_idle_seconds: 600 }, gateway: { sessionClock: () => now } })
  })
  afterEach(async () => {
    await h.close()
  })

  test("another tenant's caller gets 404 on POST, GET and DELETE of the session, each audited, and the owner keeps working", async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId as string
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/)

    for (const method of ['POST', 'GET', 'DELETE'] as const) {
      const res = await present(h, method, sessionId)
      expect({ method, status: res.status }).toEqual({ method, status: 404 })
      // A local answer: JSON-RPC error, never a Mcp-Session-Id (the SDK client adopts any it sees).
      expect(res.headers.get('mcp-session-id')).toBeNull()
      expect(res.headers.get('content-type')).toBe('application/json')
      expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 404, message: 'Session not found' } })
    }
    // Nothing reached the upstream under the owner's session from the other caller.
    expect(h.upstream.seen.filter((r) => r.headers['x-wardline-identity'] === 'mallory')).toEqual([])

    const refused = await entriesOf(h, 'mallory', 3)
    expect(refused.map((e) => [e.method, e.tenant, e.decision, e.status, e.session_id])).toEqual([
      ['POST', 'evil', 'deny', 404, sessionId],
      ['GET', 'evil', 'deny', 404, sessionId],
      ['DELETE', 'evil', 'deny', 404, sessionId],
    ])
    expect(refused[0].reason).toMatch(/session created by another principal/)
    expect(await metricSample(h.url, 'wardline_session_refused_total')).toBe(3)

    // The owner's session survived the other caller's DELETE.
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'still mine' } }))).toBe('still mine')
    await client.close()
  })

  test('the same tenant under another identity is refused too; the SDK client of the intruder sees the 404', async () => {
    const { client, transport } = await connect(h)
    const intruder = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
      sessionId: transport.sessionId,
      requestInit: { headers: as('bob', 'acme') },
    })
    await intruder.start()
    await expect(
      intruder.send({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'echo', arguments: { text: 'x' } } }),
    ).rejects.toMatchObject({
      code: 404,
    })
    await intruder.close()
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'ok' } }))).toBe('ok')
    await client.close()
  })

  test('every spelling of the id an upstream might read is checked: repeated header lines, legacy query parameters', async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId as string
    const own = await connect(h, MALLORY)
    const mine = own.transport.sessionId as string
    // Two Mcp-Session-Id lines: Node joins them, Starlette reads the first.
    const twice = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: [...Object.entries({ ...MCP_HEADERS, ...MALLORY }), ['mcp-session-id', sessionId], ['mcp-session-id', mine]],
      body: JSON.stringify(toolCall('echo', { text: 'x' })),
    })
    expect(twice.status).toBe(404)
    // The header names the intruder's own session, the query the owner's.
    for (const query of [`sessionId=${sessionId}`, `session_id=${sessionId.toUpperCase()}`, `sessionId%5B%5D=${sessionId}`]) {
      const res = await fetch(`${h.url}/mcp?${query}`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...MALLORY, 'mcp-session-id': mine },
        body: JSON.stringify(toolCall('echo', { text: 'x' })),
      })
      expect({ query, status: res.status }).toEqual({ query, status: 404 })
    }
    // The intruder's own session works.
    expect(textOf(await own.client.callTool({ name: 'echo', arguments: { text: 'mine' } }))).toBe('mine')
    await own.client.close()
    await client.close()
  })

  test('a configuration reload keeps every binding', async () => {
    const { client, transport } = await connect(h)
    expect(h.gateway.reload(h.config)).toEqual([])
    expect((await present(h, 'POST', transport.sessionId as string)).status).toBe(404)
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'after reload' } }))).toBe('after reload')
    await client.close()
  })

  test("after the owner's DELETE the binding is gone: the id is unknown to the gateway and the upstream answers it", async () => {
    const { client, transport } = await connect(h)
    const sessionId = transport.sessionId as string
    expect((await present(h, 'POST', sessionId)).status).toBe(404) // bound: the gateway's refusal
    await transport.terminateSession()
    await client.close()
    const res = await present(h, 'POST', sessionId)
    expect(res.status).toBe(404)
    // The upstream's own answer for a session it no longer has, not the gateway's refusal.
    expect(((await res.json()) as { error: { code: number } }).error.code).toBe(-32001)
    const entries = await entriesOf(h, 'mallory', 2)
    expect(entries.map((e) => [e.decision, e.status])).toEqual([
      ['deny', 404],
      ['allow', 404],
    ])
  })

  test('a binding idle for session_idle_seconds is forgotten; one its owner keeps using, or listens on, is not', async () => {
    const idle = await initializeRaw(h)
    const busy = await initializeRaw(h)
    // The SDK client opens its standalone GET stream once initialized; it stays open the whole time.
    const listening = await connect(h)
    const stream = listening.transport.sessionId as string
    await waitFor(() => h.upstream.seen.some((r) => r.method === 'GET' && r.headers['mcp-session-id'] === stream), {
      what: "the listening client's GET stream",
    })
    now += 500_000
    const use = await present(h, 'POST', busy, ALICE)
    expect(use.status).toBe(200)
    await use.text()
    now += 200_000 // idle: 700 s since its last use; busy: 200 s; listening: its stream is open
    expect((await present(h, 'POST', busy)).status).toBe(404)
    expect((await present(h, 'POST', stream)).status).toBe(404)
    await listening.client.close()
    const res = await present(h, 'POST', idle)
    // Unknown to the gateway now: forwarded, and the upstream (which keeps sessions) runs it.
    expect(res.status).toBe(200)
    const entries = await entriesOf(h, 'mallory', 3)
    expect(entries.map((e) => e.decision)).toEqual(['deny', 'deny', 'allow'])
  })
})

describe('bounded memory', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateful', config: { max_sessions_per_identity: 2 } })
  })
  afterEach(async () => {
    await h.close()
  })

  test("an identity opening sessions without end forgets only its own oldest, never another's", async () => {
    const alice = await initializeRaw(h)
    const first = await initializeRaw(h, MALLORY)
    for (let i = 0; i < 4; i++) await initializeRaw(h, MALLORY)
    expect(await metricSample(h.url, 'wardline_session_bindings_evicted_total{cause="identity_full"}')).toBe(3)
    expect((await present(h, 'POST', alice)).status).toBe(404)
    // Mallory's own first session is no longer bound (it passes unchecked, and still works upstream).
    expect((await present(h, 'POST', first, as('bob', 'acme'))).status).toBe(200)
  })
})

describe('legacy HTTP+SSE sessions are bound to the caller of GET /sse', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateful' })
  })
  afterEach(async () => {
    await h.close()
  })

  test('another caller posting to /messages?sessionId= of the stream gets 404; the owner keeps working', async () => {
    const transport = new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers: ALICE } })
    const client = new Client({ name: 'legacy', version: '1.0.0' })
    await client.connect(transport)
    const post = h.upstream.seen.find((r) => r.method === 'POST')
    const sessionId = new URL(post?.url ?? '', 'http://x').searchParams.get('sessionId') as string
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/)

    const body = JSON.stringify(toolCall('echo', { text: 'hijacked' }, 99))
    for (const query of [`sessionId=${sessionId}`, `sessionId=${sessionId.replaceAll('-', '').toUpperCase()}`]) {
      const res = await fetch(`${h.url}/messages?${query}`, { method: 'POST', headers: { ...MCP_HEADERS, ...MALLORY }, body })
      expect({ query, status: res.status }).toEqual({ query, status: 404 })
    }
    expect(h.upstream.seen.filter((r) => r.headers['x-wardline-identity'] === 'mallory')).toEqual([])
    const refused = await entriesOf(h, 'mallory', 2)
    expect(refused.map((e) => [e.decision, e.status])).toEqual([
      ['deny', 404],
      ['deny', 404],
    ])
    expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'old transport' } }))).toBe('old transport')
    await client.close()
  })
})
