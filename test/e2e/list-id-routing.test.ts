/**
 * Lists that leak by id type. A stateful MCP server routes each answer to the
 * stream of the POST that carried its id, by its own reading of the id: the official Python SDK by
 * `str(id)` (mcp/server/streamable_http.py: `_request_streams[str(message.id)]`, latest POST wins), so
 * `7` and `"7"` are one id there. A caller that reuses a pending list's id in another spelling could
 * get the unfiltered list on a stream the filter does not read. Here a small real HTTP MCP server routes the
 * way the Python SDK does (or by another rule the gateway cannot foresee), behind a real gateway.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { type Harness, MCP_HEADERS, as, startHarness } from '../helpers/harness'
import { startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'
import { gate } from './raw-upstream'

type Json = Record<string, unknown>

/** bob may call `add` only: a full tools list names `echo` and `whoami`, which he must not see. */
const POLICY = {
  default: 'deny',
  rules: [
    { identity: '*', tool: 'add', effect: 'allow' },
    { identity: '*', method: 'resources/read', tool: 'example://notes/secret-*', effect: 'deny' },
    { identity: '*', method: 'resources/read', tool: 'example://notes/*', effect: 'allow' },
  ],
}
const NOTES = ['public-1', 'secret-1']
const TOOLS = ['echo', 'add', 'whoami'].map((name) => ({ name, inputSchema: { type: 'object' } }))

interface RoutingServer {
  readonly url: string
  /** Resolves when the server started on a tools/list (it then waits for `openList`). */
  readonly listCalled: Promise<void>
  openList(): void
  /** The ids of the tools/call requests it received, as sent. */
  readonly calls: unknown[]
  /** The keys of the POST streams open now, in every session. */
  openStreams(): string[]
  close(): Promise<void>
}

/**
 * A stateful Streamable HTTP MCP server on port 0 that files each POST's SSE stream under
 * `route(id)`, the latest POST winning, and sends each answer to the stream filed under the answer's
 * `route(id)`, or to the session's GET stream when there is none (as the Python SDK does for an
 * answer it cannot correlate). tools/list waits for `openList`; tools/call answers at once unless
 * `holdCalls`.
 */
async function routingServer(route: (id: unknown) => string, holdCalls: boolean): Promise<RoutingServer> {
  const listGate = gate()
  let listCalled!: () => void
  const listSeen = new Promise<void>((resolve) => (listCalled = resolve))
  const calls: unknown[] = []
  const sessions = new Map<string, { streams: Map<string, ServerResponse>; get: ServerResponse | null }>()
  const send = (session: { streams: Map<string, ServerResponse>; get: ServerResponse | null }, message: Json): void => {
    const key = route(message.id)
    const target = session.streams.get(key) ?? session.get
    if (target === null || target.writableEnded) return
    target.write(`event: message\ndata: ${JSON.stringify(message)}\n\n`)
    if (target !== session.get) {
      session.streams.delete(key)
      target.end()
    }
  }
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const sid = req.headers['mcp-session-id']
      const session = typeof sid === 'string' ? sessions.get(sid) : undefined
      if (req.method === 'GET') {
        if (session === undefined) return void res.writeHead(404).end()
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.flushHeaders()
        session.get = res
        res.on('close', () => (session.get = session.get === res ? null : session.get))
        return
      }
      if (req.method !== 'POST') return void res.writeHead(200).end()
      const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json
      if (message.method === 'initialize') {
        const id = randomUUID()
        sessions.set(id, { streams: new Map(), get: null })
        const result = {
          protocolVersion: (message.params as Json).protocolVersion,
          capabilities: { tools: {} },
          serverInfo: { name: 'routes-by-text', version: '1.0.0' },
        }
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': id })
        return void res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }))
      }
      if (session === undefined) return void res.writeHead(404).end()
      if (message.id === undefined || message.method === undefined) return void res.writeHead(202).end()
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      const key = route(message.id)
      session.streams.set(key, res)
      res.on('close', () => {
        if (session.streams.get(key) === res) session.streams.delete(key)
      })
      if (message.method === 'tools/list' || message.method === 'completion/complete') {
        listCalled()
        const result = message.method === 'tools/list' ? { tools: TOOLS } : { completion: { values: NOTES, total: 2, hasMore: false } }
        void listGate.wait.then(() => send(session, { jsonrpc: '2.0', id: message.id, result }))
      } else if (message.method === 'tools/call') {
        calls.push(message.id)
        if (!holdCalls) send(session, { jsonrpc: '2.0', id: message.id, result: { content: [{ type: 'text', text: 'ok' }] } })
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    listCalled: listSeen,
    openList: () => listGate.open(),
    calls,
    openStreams: () => [...sessions.values()].flatMap((session) => [...session.streams.keys()]),
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/**
 * An official TypeScript SDK server (stateful) whose tools/list waits for `openList` and whose
 * tools/call never answers: the SDK files answer streams by the id's value.
 */
async function sdkServer(): Promise<RoutingServer> {
  const listGate = gate()
  let listCalled!: () => void
  const listSeen = new Promise<void>((resolve) => (listCalled = resolve))
  const calls: unknown[] = []
  const upstream = await startSdkUpstream(() => {
    const mcp = new Server({ name: 'sdk', version: '1.0.0' }, { capabilities: { tools: {} } })
    mcp.setRequestHandler(ListToolsRequestSchema, async () => {
      listCalled()
      await listGate.wait
      return { tools: TOOLS }
    })
    mcp.setRequestHandler(CallToolRequestSchema, async (request) => {
      calls.push(request.params.name)
      await new Promise<void>(() => undefined)
      return { content: [] }
    })
    return mcp
  })
  return {
    url: upstream.url,
    listCalled: listSeen,
    openList: () => listGate.open(),
    calls,
    openStreams: () => [],
    close: () => upstream.close(),
  }
}

/** What the Python SDK files a stream under: `str(id)`, so 7 and "7" are one key. */
const pythonStr = (id: unknown): string => String(id)

let h: Harness | undefined
let upstream: RoutingServer | undefined
afterEach(async () => {
  await h?.close()
  await upstream?.close()
  h = undefined
  upstream = undefined
})

async function behind(server: RoutingServer): Promise<Harness> {
  upstream = server
  h = await startHarness({ upstreamUrl: server.url, config: { policy: POLICY } })
  return h
}

function post(body: unknown, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${h!.url}/mcp`, {
    method: 'POST',
    headers: { ...as('bob'), ...MCP_HEADERS, ...headers },
    body: JSON.stringify(body),
    signal,
  })
}

/** Opens a session as bob; returns the headers that carry it. */
async function session(): Promise<Record<string, string>> {
  const init = await post(
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'attacker', version: '1' } },
    },
    {},
  )
  await init.text()
  const headers = { 'mcp-session-id': init.headers.get('mcp-session-id') ?? '', 'mcp-protocol-version': '2025-06-18' }
  await (await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, headers)).text()
  return headers
}

/** Every tool name of every list answer in an SSE body (by shape, as a client reads it). */
function listedTools(sse: string): string[][] {
  return sse
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => JSON.parse(line.slice(6)) as { result?: { tools?: Array<{ name: string }> } })
    .filter((m) => m.result?.tools !== undefined)
    .map((m) => m.result!.tools!.map((t) => t.name))
}

describe('a call that reuses a pending list id in another spelling', () => {
  test.each<[string, () => Promise<RoutingServer>, unknown, unknown]>([
    ['routes by str(id), as the Python SDK: 7 then "7"', () => routingServer(pythonStr, true), 7, '7'],
    ['routes by str(id), as the Python SDK: "7" then 7', () => routingServer(pythonStr, true), '7', 7],
    ['is the official TypeScript SDK: 7 then "7"', sdkServer, 7, '7'],
  ])('against a server that %s, is refused with 409 and no stream carries the unfiltered list', async (_what, start, listId, callId) => {
    const server = await start()
    await behind(server)
    const headers = await session()
    const abort = new AbortController()
    const list = post({ jsonrpc: '2.0', id: listId, method: 'tools/list' }, headers, abort.signal)
    await server.listCalled
    const reused = await post({ jsonrpc: '2.0', id: callId, method: 'tools/call', params: { name: 'add', arguments: {} } }, headers)
    expect(reused.status).toBe(409)
    expect(((await reused.json()) as Json).error).toMatchObject({ code: -32600 })
    expect(server.calls).toEqual([])
    server.openList()
    expect(listedTools(await (await list).text())).toEqual([['add']])
    const entries = (await h!.audit()).filter((e) => e.method === 'tools/list' || e.status === 409)
    expect(entries.map((e) => [e.method, e.status, e.reason])).toEqual([
      ['tools/call', 409, 'request id reuses the id of a list or completion call still in flight in this session'],
      ['tools/list', 200, 'list filtered by policy: 2 of 3 tools hidden'],
    ])
  })

  test('every spelling a server could read as the same id is refused while the list runs; others pass', async () => {
    const server = await routingServer(pythonStr, false)
    await behind(server)
    const headers = await session()
    const abort = new AbortController()
    const list = post({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, headers, abort.signal)
    await server.listCalled
    const call = (id: unknown): Promise<number> =>
      post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'add', arguments: {} } }, headers).then(async (r) => {
        await r.text()
        return r.status
      })
    for (const id of [1, '1', '01', '1.0', '1e0', ' 1 ', '+1', '0x1']) expect([id, await call(id)]).toEqual([id, 409])
    for (const id of [2, '2', 'one', '1a']) expect([id, await call(id)]).toEqual([id, 200])
    server.openList()
    expect(listedTools(await (await list).text())).toEqual([['add']])
  })
})

describe('a list answer a server delivers elsewhere than on its own stream', () => {
  test("is filtered on another request's stream, when the server routes by a rule the id check does not foresee", async () => {
    // Ids routed case-insensitively: "abc" and "ABC" are distinct for the gateway (no 409) but one
    // stream for this server, so the list's answer arrives on the tools/call's stream.
    const server = await routingServer((id) => String(id).toLowerCase(), true)
    await behind(server)
    const headers = await session()
    const abort = new AbortController()
    const list = post({ jsonrpc: '2.0', id: 'abc', method: 'tools/list' }, headers, abort.signal).catch(() => null)
    await server.listCalled
    const call = await post({ jsonrpc: '2.0', id: 'ABC', method: 'tools/call', params: { name: 'add', arguments: {} } }, headers)
    expect(call.status).toBe(200)
    await waitFor(() => server.calls.length === 1, { what: 'the tools/call to reach the server' })
    server.openList()
    expect(listedTools(await call.text())).toEqual([['add']])
    abort.abort()
    await list
    const entry = (await h!.audit()).find((e) => e.method === 'tools/call')
    expect(entry).toMatchObject({ decision: 'allow', reason: 'list filtered by policy: 2 of 3 tools hidden in 1 answer' })
  })

  test("a completion answer on another request's stream has every value hidden: its request is not that one", async () => {
    const server = await routingServer((id) => String(id).toLowerCase(), true)
    await behind(server)
    const headers = await session()
    const abort = new AbortController()
    const completion = {
      jsonrpc: '2.0',
      id: 'abc',
      method: 'completion/complete',
      params: { ref: { type: 'ref/resource', uri: 'example://notes/{id}' }, argument: { name: 'id', value: '' } },
    }
    const pending = post(completion, headers, abort.signal).catch(() => null)
    await server.listCalled
    // The same id in another spelling any SDK would confuse: refused while the completion runs.
    const reused = await post({ jsonrpc: '2.0', id: 'abc', method: 'tools/call', params: { name: 'add', arguments: {} } }, headers)
    expect(reused.status).toBe(409)
    await reused.text()
    const call = await post({ jsonrpc: '2.0', id: 'ABC', method: 'tools/call', params: { name: 'add', arguments: {} } }, headers)
    await waitFor(() => server.calls.length === 1, { what: 'the tools/call to reach the server' })
    server.openList()
    const answers = (await call.text())
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => JSON.parse(line.slice(6)) as { result: { completion: unknown } })
    expect(answers.map((m) => m.result.completion)).toEqual([{ values: [], total: 0, hasMore: false }])
    abort.abort()
    await pending
    const entry = (await h!.audit()).find((e) => e.method === 'tools/call' && e.status === 200)
    expect(entry?.reason).toBe('completion filtered by policy: 2 of 2 values hidden in 1 answer')
  })

  test("is filtered on the session's GET stream, where a server sends an answer whose stream is gone", async () => {
    const server = await routingServer(pythonStr, true)
    await behind(server)
    const headers = await session()
    const stream = await fetch(`${h!.url}/mcp`, { headers: { ...as('bob'), accept: 'text/event-stream', ...headers } })
    const reader = stream.body!.getReader()
    const abort = new AbortController()
    const list = post({ jsonrpc: '2.0', id: 5, method: 'tools/list' }, headers, abort.signal).catch(() => null)
    await server.listCalled
    abort.abort()
    await list
    // The gateway aborted the list's upstream request, so its stream is gone: the answer goes to GET.
    await waitFor(async () => (await h!.audit()).some((e) => e.method === 'tools/list'), { what: 'the aborted list to be audited' })
    await waitFor(() => !server.openStreams().includes('5'), { what: "the server to see the list's stream close" })
    server.openList()
    let text = ''
    while (!text.includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value as Uint8Array)
    await reader.cancel()
    expect(listedTools(text)).toEqual([['add']])
  })

  test('the official SDK client lists and calls concurrently in one session: nothing refused, the list filtered, the result intact', async () => {
    const server = await routingServer(pythonStr, false)
    await behind(server)
    const transport = new StreamableHTTPClientTransport(new URL(`${h!.url}/mcp`), { requestInit: { headers: as('bob') } })
    const client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(transport)
    const listing = client.listTools()
    await server.listCalled
    const result = await client.callTool({ name: 'add', arguments: {} })
    expect(result.content).toEqual([{ type: 'text', text: 'ok' }])
    server.openList()
    expect((await listing).tools.map((t) => t.name)).toEqual(['add'])
    await client.close()
    const entries = (await h!.audit()).filter((e) => e.method === 'tools/call' || e.method === 'tools/list')
    expect(entries.map((e) => [e.method, e.status, e.reason])).toEqual([
      ['tools/call', 200, undefined],
      ['tools/list', 200, 'list filtered by policy: 2 of 3 tools hidden'],
    ])
  })
})
