/**
 * Red team (lists that leak by id type): the 409 guard for a reused list id and
 * "every answer of a session with a list in flight is read" both key the session by the
 * `Mcp-Session-Id` value Node hands the gateway. Node joins a repeated header into one value
 * (`S, S`), while the gateway forwards the raw header lines, and a server that reads the first value
 * (Starlette's `request.headers.get`, which the official Python SDK uses; Go's `Header.Get`) sees
 * session `S`. So a call sent with the header twice is in no session the filter knows of, but in the
 * list's session for the server, which routes the list's answer to it.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { type Harness, MCP_HEADERS, as, startHarness } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'

type Json = Record<string, unknown>

const POLICY = { default: 'deny', rules: [{ identity: '*', tool: 'add', effect: 'allow' }] }
const TOOLS = ['echo', 'add', 'whoami'].map((name) => ({ name, inputSchema: { type: 'object' } }))

/** The first value of a header, as Starlette and Go read a repeated one. */
function firstValue(req: IncomingMessage, name: string): string | undefined {
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i].toLowerCase() === name) return req.rawHeaders[i + 1]
  return undefined
}

/** The session as a WSGI/CGI server reads it: HTTP_MCP_SESSION_ID, which `Mcp_Session_Id` also fills. */
function cgiValue(req: IncomingMessage, name: string): string | undefined {
  for (let i = 0; i < req.rawHeaders.length; i += 2)
    if (req.rawHeaders[i].toLowerCase().replace(/_/g, '-') === name) return req.rawHeaders[i + 1]
  return undefined
}

interface ListGatingServer {
  url: string
  listCalled: Promise<void>
  openList(): void
  calls: unknown[]
  close(): Promise<void>
}

/**
 * Where a server files a POST's SSE stream (the answer for an id goes to the stream filed last under
 * that id's key), or null once it has answered the POST itself (an initialize, an unknown session).
 */
type StreamsOf = (req: IncomingMessage, res: ServerResponse, message: Json) => Map<unknown, ServerResponse> | null

/**
 * A server whose POSTs with an id each get an SSE stream, filed by `streamsOf` under `keyOf(id)`, the
 * latest POST winning; tools/list answers only once `openList` is called, on the stream then filed
 * under its id; tools/call never answers.
 */
async function listGatingServer(streamsOf: StreamsOf, keyOf: (id: unknown) => unknown): Promise<ListGatingServer> {
  let openList!: () => void
  const listGate = new Promise<void>((resolve) => (openList = resolve))
  let listCalled!: () => void
  const listSeen = new Promise<void>((resolve) => (listCalled = resolve))
  const calls: unknown[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (req.method !== 'POST') return void res.writeHead(405).end()
      const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json
      const streams = streamsOf(req, res, message)
      if (streams === null) return
      if (message.id === undefined) return void res.writeHead(202).end()
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      const key = keyOf(message.id)
      streams.set(key, res)
      if (message.method === 'tools/list') {
        listCalled()
        void listGate.then(() => {
          const answer = { jsonrpc: '2.0', id: message.id, result: { tools: TOOLS } }
          streams.get(key)?.end(`event: message\ndata: ${JSON.stringify(answer)}\n\n`)
        })
      } else if (message.method === 'tools/call') calls.push(message.id)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    listCalled: listSeen,
    openList,
    calls,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/**
 * A stateful Streamable HTTP server routing answers as the Python SDK does: each POST's SSE stream is
 * filed under `str(id)` in its session (read from the header by `sessionOf`), the latest POST winning.
 */
function pythonLikeServer(sessionOf: (req: IncomingMessage, name: string) => string | undefined = firstValue): Promise<ListGatingServer> {
  const sessions = new Map<string, Map<unknown, ServerResponse>>()
  return listGatingServer(
    (req, res, message) => {
      if (message.method === 'initialize') {
        const id = randomUUID()
        sessions.set(id, new Map())
        const result = { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'py-like', version: '1' } }
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': id })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }))
        return null
      }
      const sid = sessionOf(req, 'mcp-session-id')
      const streams = sid === undefined ? undefined : sessions.get(sid)
      if (streams !== undefined) return streams
      res.writeHead(404).end()
      return null
    },
    (id) => JSON.stringify(id).replace(/^"(.*)"$/, '$1'), // str(id): 7 and "7" alike
  )
}

let h: Harness | undefined
let upstream: ListGatingServer | undefined
afterEach(async () => {
  // The upstream first: a list whose answer went elsewhere would hold the gateway's shutdown grace.
  await upstream?.close()
  await h?.close()
  h = undefined
  upstream = undefined
})

function toolNames(sse: string): string[][] {
  return sse
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => JSON.parse(line.slice(6)) as { result?: { tools?: Array<{ name: string }> } })
    .filter((m) => m.result?.tools !== undefined)
    .map((m) => m.result!.tools!.map((t) => t.name))
}

test('a call sending Mcp-Session-Id twice cannot receive the unfiltered list of a list call in flight under its id', async () => {
  upstream = await pythonLikeServer()
  h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
  const url = `${h.url}/mcp`
  const headers = { ...as('bob'), ...MCP_HEADERS }
  const init = await send(url, 'POST', headers, JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {} }))
  const sid = String(init.headers['mcp-session-id'])
  const inSession = { ...headers, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' }
  const list = send(url, 'POST', inSession, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }))
  await upstream.listCalled
  // The same id, the session header sent twice: for the server, session `sid`; for Node, `sid, sid`.
  const call = send(
    url,
    'POST',
    { ...inSession, 'mcp-session-id': [sid, sid] },
    JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'add', arguments: {} } }),
  )
  // Refused at once, or forwarded: then the server receives it and the list's answer comes.
  await Promise.race([call, waitFor(() => upstream!.calls.length === 1, { what: 'the tools/call at the server' }).catch(() => undefined)])
  upstream.openList()
  const answer = await call
  // Either refused (a repeated session header is ambiguous), or whatever it carries is filtered.
  if (answer.status === 200) for (const names of toolNames(answer.body)) expect(names).toEqual(['add'])
  else expect(answer.status).toBeGreaterThanOrEqual(400)
  await list.catch(() => undefined)
}, 30_000)

test('a call naming its session in Mcp_Session_Id (underscore) cannot receive the unfiltered list through a CGI-style server', async () => {
  // WSGI/CGI servers read both Mcp-Session-Id and Mcp_Session_Id as HTTP_MCP_SESSION_ID; the gateway
  // sees no session at all, so neither the 409 guard nor the reading of the session's answers applies.
  upstream = await pythonLikeServer(cgiValue)
  h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
  const url = `${h.url}/mcp`
  const headers = { ...as('bob'), ...MCP_HEADERS }
  const init = await send(url, 'POST', headers, JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {} }))
  const sid = String(init.headers['mcp-session-id'])
  const inSession = { ...headers, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' }
  const list = send(url, 'POST', inSession, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }))
  list.catch(() => undefined)
  await upstream.listCalled
  const call = send(
    url,
    'POST',
    { ...headers, 'mcp-protocol-version': '2025-06-18', mcp_session_id: sid },
    JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'add', arguments: {} } }),
  )
  await Promise.race([call, waitFor(() => upstream!.calls.length === 1, { what: 'the tools/call at the server' }).catch(() => undefined)])
  upstream.openList()
  const answer = await call
  if (answer.status === 200) for (const names of toolNames(answer.body)) expect(names).toEqual(['add'])
  else expect(answer.status).toBeGreaterThanOrEqual(400)
}, 30_000)

/**
 * A stateless server that files every POST's stream under its id in one map for all callers: what
 * the official TypeScript SDK did before 1.26 when one stateless transport served every request
 * (GHSA-345p-7cg4-v4c7), and what any server keyed by id alone does. No Mcp-Session-Id anywhere.
 */
function sharedStatelessServer(): Promise<ListGatingServer> {
  const streams = new Map<unknown, ServerResponse>()
  return listGatingServer(
    () => streams,
    (id) => id,
  )
}

test('without sessions, a call reusing the id of a list in flight cannot receive the unfiltered list', async () => {
  upstream = await sharedStatelessServer()
  h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
  const url = `${h.url}/mcp`
  const headers = { ...as('bob'), ...MCP_HEADERS, 'mcp-protocol-version': '2025-06-18' }
  const list = send(url, 'POST', headers, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }))
  list.catch(() => undefined)
  await upstream.listCalled
  const call = send(
    url,
    'POST',
    headers,
    JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'add', arguments: {} } }),
  )
  await Promise.race([call, waitFor(() => upstream!.calls.length === 1, { what: 'the tools/call at the server' }).catch(() => undefined)])
  upstream.openList()
  const answer = await call
  if (answer.status === 200) for (const names of toolNames(answer.body)) expect(names).toEqual(['add'])
  else expect(answer.status).toBeGreaterThanOrEqual(400)
}, 30_000)
