/**
 * Several servers end to end with the official SDK on both sides: two SDK servers (one McpServer per
 * session, each with tools of its own) behind one gateway at /mcp/docs and /mcp/tickets, reached by
 * the SDK client with a JWT. Each client must see and call only its server; each server must receive
 * its own configured credential, the caller's identity, and never the other's credential nor the
 * caller's token; what a server sends back (progress on a call's stream, a request of its own on the
 * session's GET stream) must reach the client; and a session is one server's alone.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { join } from 'node:path'
import { readFileSync } from 'node:fs'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { SignJWT } from 'jose'
import { z } from 'zod'
import { silentLogger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { MCP_HEADERS, configFrom, readJsonl, rpc, tempDir } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type SdkUpstream, startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'

const SECRET = 'sdk-servers-test-secret-long-enough-for-hs256-0123456789'
const DOCS_TOKEN = 'docs-upstream-credential-3f9a'
const TICKETS_TOKEN = 'tickets-upstream-credential-7c21'

/** One request as an SDK server received it. */
interface Seen {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** Its answer's status, once sent. */
  status?: number
}

/** An SDK server and what it saw: every request, and the tool calls its handlers ran. */
interface Backend {
  readonly sdk: SdkUpstream
  readonly seen: Seen[]
  readonly calls: string[]
  /** GET streams open now. */
  streams: number
}

function text(s: string): { content: Array<{ type: 'text'; text: string }> } {
  return { content: [{ type: 'text', text: s }] }
}

/**
 * `docs`: `search`, which reports progress on its call's own stream. `tickets`: `create_issue`, which
 * asks the user to confirm (elicitation) with a request unrelated to the call, so the SDK server sends
 * it on the session's standalone GET stream.
 */
async function startBackend(kind: 'docs' | 'tickets'): Promise<Backend> {
  const backend = { seen: [] as Seen[], calls: [] as string[], streams: 0 }
  const build = (): McpServer => {
    const mcp = new McpServer({ name: `${kind}-server`, version: '1.0.0' })
    if (kind === 'docs') {
      mcp.registerTool('search', { description: 'Searches the docs', inputSchema: { query: z.string() } }, async ({ query }, extra) => {
        backend.calls.push(`search ${query}`)
        const progressToken = extra._meta?.progressToken
        if (progressToken !== undefined) {
          for (const progress of [1, 2]) {
            await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 2 } })
          }
        }
        return text(`docs found ${query}`)
      })
    } else {
      mcp.registerTool('create_issue', { description: 'Files an issue', inputSchema: { title: z.string() } }, async ({ title }) => {
        backend.calls.push(`create_issue ${title}`)
        const answer = await mcp.server.elicitInput({
          message: `File "${title}"?`,
          requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
        })
        return text(`tickets ${answer.action} ${JSON.stringify(answer.content ?? {})}`)
      })
    }
    return mcp
  }
  const sdk = await startSdkUpstream(build, {}, (req, res) => {
    const seen: Seen = { method: req.method ?? '', url: req.url ?? '', headers: req.headers }
    backend.seen.push(seen)
    res.on('finish', () => (seen.status = res.statusCode))
    if (req.method !== 'GET') return
    backend.streams++
    res.on('close', () => backend.streams--)
  })
  return Object.assign(backend, { sdk })
}

async function tokenFor(sub: string): Promise<string> {
  const now = Math.floor(Date.now() / 1000)
  return new SignJWT({ sub, tenant: 'acme' })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt(now)
    .setExpirationTime(now + 600)
    .sign(new TextEncoder().encode(SECRET))
}

let docs: Backend
let tickets: Backend
let gateway: RunningGateway
let auditFile: string
let callerToken: string
const clients: Client[] = []

beforeAll(async () => {
  docs = await startBackend('docs')
  tickets = await startBackend('tickets')
  const dir = tempDir()
  auditFile = join(dir, 'audit.jsonl')
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      servers: {
        docs: { url: `${docs.sdk.url}/mcp`, headers: { Authorization: 'Bearer ${DOCS_TOKEN}', 'X-Docs-Key': 'docs-key-9d' } },
        tickets: { url: `${tickets.sdk.url}/mcp`, headers: { Authorization: 'Bearer ${TICKETS_TOKEN}' } },
      },
      auth: { mode: 'jwt', jwt: { secret: SECRET } },
      audit: { output: auditFile },
    },
    { DOCS_TOKEN, TICKETS_TOKEN },
    dir,
  )
  gateway = await startGateway(config, { log: silentLogger() })
  callerToken = await tokenFor('alice')
})

afterAll(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => undefined)
  await gateway.shutdown()
  await docs.sdk.close()
  await tickets.sdk.close()
})

interface Connected {
  readonly client: Client
  readonly transport: StreamableHTTPClientTransport
}

/** An SDK client of alice at /mcp/<server> that confirms every elicitation, its GET stream open upstream. */
async function connect(server: 'docs' | 'tickets', extraHeaders: Record<string, string> = {}): Promise<Connected> {
  const backend = server === 'docs' ? docs : tickets
  const client = new Client({ name: 'sdk-test', version: '1.0.0' }, { capabilities: { elicitation: {} } })
  client.setRequestHandler(ElicitRequestSchema, () => ({ action: 'accept', content: { confirm: true } }))
  clients.push(client)
  const streams = backend.streams
  const transport = new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp/${server}`), {
    requestInit: { headers: { authorization: `Bearer ${callerToken}`, ...extraHeaders } },
  })
  await client.connect(transport)
  await waitFor(() => backend.streams === streams + 1, { what: `the ${server} session's GET stream open upstream` })
  return { client, transport }
}

/**
 * A request a client made, not the gateway's health probe: the probe speaks for no caller, so it
 * carries no identity (and its credentials are the probe's business, not this test's).
 */
const fromClient = (r: Seen): boolean => r.headers['user-agent'] !== 'wardline-health-check'

const toolNames = async (client: Client): Promise<string[]> => (await client.listTools()).tools.map((t) => t.name).sort()

test('each client sees only its own server: its tools, and its calls reach that server alone', async () => {
  const d = await connect('docs')
  const t = await connect('tickets')
  expect(await toolNames(d.client)).toEqual(['search'])
  expect(await toolNames(t.client)).toEqual(['create_issue'])

  const progress: number[] = []
  const found = await d.client.callTool({ name: 'search', arguments: { query: 'routing' } }, undefined, {
    onprogress: (p) => void progress.push(p.progress),
  })
  expect(found.content).toEqual(text('docs found routing').content)
  // Progress went through on the call's own stream, in order, before the result.
  expect(progress).toEqual([1, 2])

  // The server's own request (elicitation) reached the client on the GET stream, and its answer came back.
  const filed = await t.client.callTool({ name: 'create_issue', arguments: { title: 'slow' } })
  expect(filed.content).toEqual(text('tickets accept {"confirm":true}').content)

  // A tool of the other server is not there: the docs server says so, and tickets never hears of it.
  const wrong = await d.client.callTool({ name: 'create_issue', arguments: { title: 'x' } })
  expect(wrong.isError).toBe(true)
  expect(docs.calls).toEqual(['search routing'])
  expect(tickets.calls).toEqual(['create_issue slow'])

  await waitFor(
    async () => {
      await gateway.audit.flush()
      return readJsonl(auditFile).filter((e) => e.method === 'tools/call').length >= 3
    },
    { what: 'the three tools/call audit entries' },
  )
  const calls = readJsonl(auditFile).filter((e) => e.method === 'tools/call')
  expect(calls.map((e) => e.tool).sort()).toEqual(['create_issue', 'create_issue', 'search'])
})

test("each server receives its own credential and the caller's identity, never the other's credential nor the caller's token", async () => {
  // A client-sent copy of docs' header, sent to both: docs gets its configured value, tickets the client's (it configured none).
  const d = await connect('docs', { 'x-docs-key': 'forged' })
  const t = await connect('tickets', { 'x-docs-key': 'forged' })
  await d.client.listTools()
  await t.client.listTools()
  const docsSeen = docs.seen.filter(fromClient)
  const ticketsSeen = tickets.seen.filter(fromClient)
  expect(docsSeen.length).toBeGreaterThan(0)
  expect(ticketsSeen.length).toBeGreaterThan(0)
  for (const r of docsSeen) {
    expect(r.headers.authorization).toBe(`Bearer ${DOCS_TOKEN}`)
    expect(r.headers['x-docs-key']).toBe('docs-key-9d')
    expect(r.headers['x-wardline-identity']).toBe('alice')
    expect(r.headers['x-wardline-tenant']).toBe('acme')
  }
  for (const r of ticketsSeen) {
    expect(r.headers.authorization).toBe(`Bearer ${TICKETS_TOKEN}`)
    expect(r.headers['x-docs-key']).not.toBe('docs-key-9d')
    expect(r.headers['x-wardline-identity']).toBe('alice')
  }
  // The caller's token and either server's credential: in no header any server saw but where it belongs,
  // and nowhere in the audit trail.
  const everything = JSON.stringify([...docs.seen, ...tickets.seen].map((r) => r.headers))
  expect(everything).not.toContain(callerToken)
  expect(JSON.stringify(tickets.seen.map((r) => r.headers))).not.toContain(DOCS_TOKEN)
  expect(JSON.stringify(docs.seen.map((r) => r.headers))).not.toContain(TICKETS_TOKEN)
  await gateway.audit.flush()
  const trail = readFileSync(auditFile, 'utf8')
  for (const secret of [DOCS_TOKEN, TICKETS_TOKEN, 'docs-key-9d', callerToken]) expect(trail).not.toContain(secret)
})

test('GET stream and DELETE of a session go to that session’s server only', async () => {
  const d = await connect('docs')
  const t = await connect('tickets')
  const docsSession = d.transport.sessionId
  const ticketsSession = t.transport.sessionId
  expect(docsSession).toBeDefined()
  expect(ticketsSession).toBeDefined()
  expect(docs.seen.some((r) => r.method === 'GET' && r.headers['mcp-session-id'] === docsSession)).toBe(true)
  expect(tickets.seen.some((r) => r.method === 'GET' && r.headers['mcp-session-id'] === ticketsSession)).toBe(true)
  expect(tickets.seen.some((r) => r.headers['mcp-session-id'] === docsSession)).toBe(false)
  expect(docs.seen.some((r) => r.headers['mcp-session-id'] === ticketsSession)).toBe(false)

  const docsStreams = docs.streams
  const ticketsStreams = tickets.streams
  await d.transport.terminateSession()
  const deleted = docs.seen.find((r) => r.method === 'DELETE' && r.headers['mcp-session-id'] === docsSession)
  expect(deleted).toBeDefined()
  await waitFor(() => deleted?.status !== undefined, { what: 'the DELETE answered upstream' })
  expect(deleted?.status).toBe(200)
  expect(tickets.seen.some((r) => r.method === 'DELETE')).toBe(false)
  // The docs session's GET stream ended with it; the tickets session's lives on and still works.
  await waitFor(() => docs.streams === docsStreams - 1, { what: 'the docs GET stream closed' })
  expect(tickets.streams).toBe(ticketsStreams)
  expect(await toolNames(t.client)).toEqual(['create_issue'])
})

test('a session id of docs presented at /mcp/tickets never reaches docs', async () => {
  const d = await connect('docs')
  const docsSession = d.transport.sessionId ?? ''
  const docsBefore = docs.seen.length
  const ticketsBefore = tickets.seen.length
  const reply = await send(
    `${gateway.url}/mcp/tickets`,
    'POST',
    { ...MCP_HEADERS, authorization: `Bearer ${callerToken}`, 'mcp-session-id': docsSession, 'mcp-protocol-version': '2025-06-18' },
    JSON.stringify(rpc('tools/list')),
  )
  expect(reply.status).not.toBe(200)
  expect(reply.body).not.toContain('search')
  expect(docs.seen.length).toBe(docsBefore)
  // If it went anywhere, it went to tickets, which knows no such session.
  for (const r of tickets.seen.slice(ticketsBefore)) expect(r.status).not.toBe(200)
  // The docs session itself is untouched.
  expect(await toolNames(d.client)).toEqual(['search'])
})
