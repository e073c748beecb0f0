/**
 * tool_refusals: result for clients of MCP 2026-07-28: the official SDK v2 client
 * (@modelcontextprotocol/client, version negotiation pinned to 2026-07-28) through the gateway to an
 * SDK v2 server (@modelcontextprotocol/server, createMcpHandler). A refused call must come back as a
 * result of that revision (with `resultType`), which the client returns as an isError result instead
 * of throwing INVALID_RESULT; the SDK v1 client on the same gateway keeps the result of its revision.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client'
import { McpServer, createMcpHandler, fromJsonSchema } from '@modelcontextprotocol/server'
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { type Harness, MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'

interface V2Server {
  readonly url: string
  close(): Promise<void>
}

/** An SDK v2 server with one tool, `echo`, on node:http (port 0): createMcpHandler is web-standard, so requests are bridged. */
async function startV2Server(): Promise<V2Server> {
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'v2-upstream', version: '1.0.0' })
    server.registerTool(
      'echo',
      {
        description: 'echoes its text',
        inputSchema: fromJsonSchema<{ text: string }>({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }),
      },
      ({ text }) => ({ content: [{ type: 'text', text }] }),
    )
    return server
  })
  const bridge = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const headers = new Headers()
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value)
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD' && chunks.length > 0
    const answer = await handler.fetch(
      new Request(`http://127.0.0.1${req.url ?? '/'}`, { method: req.method, headers, body: hasBody ? Buffer.concat(chunks) : undefined }),
    )
    res.writeHead(answer.status, Object.fromEntries(answer.headers))
    if (answer.body !== null) for await (const chunk of answer.body) res.write(chunk)
    res.end()
  }
  const server: Server = createServer((req, res) => {
    bridge(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500)
      res.end(String(err))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    close: async () => {
      await handler.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

interface ToolResult {
  content: Array<{ type: string; text: string }>
  isError?: boolean
  _meta?: Record<string, unknown>
}

let upstream: V2Server
let h: Harness
beforeAll(async () => {
  upstream = await startV2Server()
  h = await startHarness({
    upstreamUrl: upstream.url,
    config: {
      tool_refusals: 'result',
      features: { budget_enforcement: true },
      // One call per identity and window: the second is refused, and its text speaks in the singular.
      budget: { requests_per_window: 1, window_seconds: 60 },
      policy: { default: 'allow', rules: [{ identity: 'denied-*', tool: 'echo', effect: 'deny' }] },
    },
  })
})
afterAll(async () => {
  await h.close()
  await upstream.close()
})

test('the SDK v2 client on 2026-07-28 gets a refused call as an isError result, not INVALID_RESULT', async () => {
  const client = new Client({ name: 'agent-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice') } }))
  try {
    expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28')
    const served = (await client.callTool({ name: 'echo', arguments: { text: 'hi' } })) as ToolResult
    expect(served.content).toEqual([{ type: 'text', text: 'hi' }])
    const refused = (await client.callTool({ name: 'echo', arguments: { text: 'again' } })) as ToolResult
    expect(refused.isError).toBe(true)
    expect(refused.content).toHaveLength(1)
    expect(refused.content[0].type).toBe('text')
    expect(refused.content[0].text).toMatch(/^Rate limit: your identity's limit of 1 call per 60 s is used up\. Try again in \d+ s\.$/)
    expect(Object.keys(refused._meta ?? {}).sort()).toEqual(['bucket', 'decision', 'retry_after_seconds'])
    expect(refused._meta).toMatchObject({ bucket: 'identity', decision: 'throttled' })
  } finally {
    await client.close()
  }
  const calls = (await h.audit()).filter((e) => e.method === 'tools/call' && e.identity === 'alice')
  expect(calls.map((e) => [e.tool, e.decision, e.status])).toEqual([
    ['echo', 'allow', 200],
    ['echo', 'throttled', 200],
  ])
})

test('the SDK v1 client on the same gateway keeps the result of its revision, without resultType', async () => {
  const client = new ClientV1({ name: 'agent-v1', version: '1.0.0' })
  await client.connect(new TransportV1(new URL(`${h.url}/mcp`), { requestInit: { headers: as('bob') } }))
  try {
    expect((await client.callTool({ name: 'echo', arguments: { text: 'hi' } })).isError).toBeFalsy()
    const refused = (await client.callTool({ name: 'echo', arguments: { text: 'again' } })) as ToolResult
    expect(refused.isError).toBe(true)
    expect(refused.content[0].text).toMatch(/^Rate limit: your identity's limit of 1 call per 60 s is used up\. Try again in \d+ s\.$/)
    // The v1 client's result schema passes unknown members through: none was added.
    expect(Object.keys(refused).sort()).toEqual(['_meta', 'content', 'isError'])
  } finally {
    await client.close()
  }
})

describe('the revision is read from the MCP-Protocol-Version header, else from params._meta', () => {
  /** The result of a tools/call of echo that policy denies (identity denied-…), POSTed with `headers` and `_meta`. */
  async function deniedResult(
    identity: string,
    headers: Record<string, string>,
    meta?: Record<string, unknown>,
  ): Promise<Record<string, unknown>> {
    const body = toolCall('echo', { text: 'x' }, 5) as { params: Record<string, unknown> }
    if (meta !== undefined) body.params._meta = meta
    const res = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as(identity), ...headers },
      body: JSON.stringify(body),
    })
    expect(res.status).toBe(200)
    const { result } = (await res.json()) as { result: Record<string, unknown> }
    expect(result).toMatchObject({
      isError: true,
      content: [{ type: 'text', text: 'Tool "echo" is not allowed for you by policy. Do not retry it.' }],
    })
    return result
  }

  let callers = 0
  test.each([
    ['the header 2026-07-28', { 'mcp-protocol-version': '2026-07-28' }, undefined, 'complete'],
    ['a later revision in the header', { 'mcp-protocol-version': '2027-01-01' }, undefined, 'complete'],
    ['no header, params._meta names 2026-07-28', {}, { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' }, 'complete'],
    ['the header 2025-11-25', { 'mcp-protocol-version': '2025-11-25' }, undefined, undefined],
    ['no header and no _meta', {}, undefined, undefined],
    ['no header, params._meta names 2025-06-18', {}, { 'io.modelcontextprotocol/protocolVersion': '2025-06-18' }, undefined],
  ])('%s', async (_name, headers, meta, resultType) => {
    // A denied call costs the caller's identity bucket (budget.md), so each case is another caller.
    const result = await deniedResult(`denied-${++callers}`, headers, meta)
    expect(result.resultType).toBe(resultType)
    expect('resultType' in result).toBe(resultType !== undefined)
  })
})
