/**
 * What an agent sees in its lists: the official SDK client, through a real gateway with a policy, to
 * the official-SDK example server, over every transport. A tool is listed iff calling it is allowed.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ExampleMode } from '../../examples/mcp-server'
import { type Harness, as, configFrom, startHarness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { startRawUpstream } from './raw-upstream'

const POLICY = {
  default: 'deny',
  rules: [
    { identity: 'alice', tool: 'echo', effect: 'allow' },
    { identity: '*', tool: 'add', effect: 'allow' },
    { identity: 'alice', method: 'prompts/*', tool: '*', effect: 'allow' },
    { identity: '*', method: 'resources/list', tool: '*', effect: 'allow' },
    { identity: '*', method: 'resources/templates/list', tool: '*', effect: 'allow' },
    { identity: 'bob', method: 'resources/read', tool: 'example://*', effect: 'allow' },
  ],
}

async function connect(h: Harness, identity: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as(identity) } })
  const client = new Client({ name: 'agent', version: '1.0.0' })
  await client.connect(transport)
  return client
}

describe.each<ExampleMode>(['stateless-json', 'stateless-sse', 'stateful'])('lists filtered by policy (%s upstream)', (mode) => {
  let h: Harness
  afterEach(async () => {
    await h?.close()
  })

  test('each caller lists exactly what it may call, and the audit says how many were hidden', async () => {
    h = await startHarness({ mode, config: { policy: POLICY } })
    const alice = await connect(h, 'alice')
    expect((await alice.listTools()).tools.map((t) => t.name).sort()).toEqual(['add', 'echo'])
    expect((await alice.listPrompts()).prompts.map((p) => p.name)).toEqual(['greeting'])
    expect((await alice.listResources()).resources).toEqual([])
    // What is listed can be called; what is not is refused.
    await expect(alice.callTool({ name: 'echo', arguments: { text: 'hi' } })).resolves.toBeDefined()
    await expect(alice.callTool({ name: 'whoami', arguments: {} })).rejects.toThrow(/403/)
    await alice.close()

    const bob = await connect(h, 'bob')
    expect((await bob.listTools()).tools.map((t) => t.name)).toEqual(['add'])
    await expect(bob.listPrompts()).rejects.toThrow(/403/) // prompts/list itself is gated
    expect((await bob.listResources()).resources.map((r) => r.uri)).toEqual(['example://readme'])
    await bob.close()

    const lists = (await h.audit()).filter((e) => e.method.endsWith('/list'))
    expect(lists.map((e) => [e.identity, e.method, e.decision, e.reason ?? ''])).toEqual([
      ['alice', 'tools/list', 'passthrough', 'list filtered by policy: 3 of 5 tools hidden'],
      ['alice', 'prompts/list', 'allow', ''],
      ['alice', 'resources/list', 'allow', 'list filtered by policy: 1 of 1 resources hidden'],
      ['bob', 'tools/list', 'passthrough', 'list filtered by policy: 4 of 5 tools hidden'],
      ['bob', 'prompts/list', 'deny', 'default'],
      ['bob', 'resources/list', 'allow', ''],
    ])
  })

  test('policy.filter_lists: false lists everything, as the upstream answered', async () => {
    h = await startHarness({ mode, config: { policy: { ...POLICY, filter_lists: false } } })
    const bob = await connect(h, 'bob')
    expect((await bob.listTools()).tools.length).toBe(5)
    await bob.close()
    expect((await h.audit()).find((e) => e.method === 'tools/list')?.reason).toBeUndefined()
  })
})

describe('lists filtered on the legacy HTTP+SSE transport (answers arrive on the GET /sse stream)', () => {
  let h: Harness
  afterEach(async () => {
    await h?.close()
  })

  test('the SSE client lists only what its caller may call', async () => {
    h = await startHarness({ mode: 'stateful', config: { policy: POLICY } })
    const transport = new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers: as('bob') } })
    const client = new Client({ name: 'legacy-agent', version: '1.0.0' })
    await client.connect(transport)
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(['add'])
    await client.close()
    await waitFor(async () => (await h.audit()).some((e) => e.method === 'GET'), { what: 'the audit entry of the closed SSE stream' })
    const stream = (await h.audit()).find((e) => e.method === 'GET')
    expect(stream?.reason).toContain('list filtered by policy: 4 of 5 tools hidden')
  })
})

describe('raw list answers', () => {
  let h: Harness
  afterEach(async () => {
    await h?.close()
  })

  const TOOLS = ['echo', 'add', 'whoami', 'expensive_tool'].map((name) => ({ name, inputSchema: { type: 'object' } }))
  const BATCH_ANSWER = JSON.stringify([
    { jsonrpc: '2.0', id: 1, result: { tools: TOOLS, nextCursor: 'page-2' } },
    {
      jsonrpc: '2.0',
      id: 2,
      result: {
        resourceTemplates: [
          { uriTemplate: 'example://{id}', name: 't' },
          { uriTemplate: 'file:///{p}', name: 'f' },
        ],
      },
    },
    { jsonrpc: '2.0', id: 3, result: {} },
  ])
  const BATCH = [
    { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    { jsonrpc: '2.0', id: 2, method: 'resources/templates/list' },
    { jsonrpc: '2.0', id: 3, method: 'ping' },
  ]

  async function postBatch(url: string): Promise<{ status: number; type: string; text: string }> {
    const res = await fetch(`${url}/mcp`, {
      method: 'POST',
      headers: { ...as('bob'), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(BATCH),
    })
    return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() }
  }

  test.each(['json', 'sse'])('a batch of lists is filtered element by element, pagination kept (%s answer)', async (format) => {
    const upstream = await startRawUpstream((_req, res) => {
      if (format === 'json') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(BATCH_ANSWER)
      } else {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        for (const message of JSON.parse(BATCH_ANSWER) as unknown[])
          res.write(`id: e1\nevent: message\ndata: ${JSON.stringify(message)}\n\n`)
        res.end()
      }
    })
    h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
    try {
      const answer = await postBatch(h.url)
      expect(answer.status).toBe(200)
      const messages =
        format === 'json'
          ? (JSON.parse(answer.text) as Array<Record<string, unknown>>)
          : answer.text
              .split('\n')
              .filter((l) => l.startsWith('data: '))
              .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>)
      expect(messages).toEqual([
        { jsonrpc: '2.0', id: 1, result: { tools: [TOOLS[1]], nextCursor: 'page-2' } },
        { jsonrpc: '2.0', id: 2, result: { resourceTemplates: [{ uriTemplate: 'example://{id}', name: 't' }] } },
        { jsonrpc: '2.0', id: 3, result: {} },
      ])
      if (format === 'sse') expect(answer.text.match(/^id: e1$/gm)).toHaveLength(3) // the event's other lines are kept
      const entries = await h.audit()
      expect(entries.map((e) => [e.method, e.reason ?? ''])).toEqual([
        ['resources/templates/list', 'list filtered by policy: 1 of 2 resourceTemplates hidden'],
        ['tools/list,ping', 'list filtered by policy: 3 of 4 tools hidden'],
      ])
    } finally {
      await upstream.close()
    }
  })

  test('a list answer replayed on a GET stream (resumption with Last-Event-ID) is filtered too', async () => {
    const upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(`id: 9\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: TOOLS } })}\n\n`)
    })
    h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
    try {
      const res = await fetch(`${h.url}/mcp`, { headers: { ...as('bob'), accept: 'text/event-stream', 'last-event-id': '8' } })
      const text = await res.text()
      expect(text).toContain('"add"')
      expect(text).not.toContain('whoami')
    } finally {
      await upstream.close()
    }
  })

  test('a reload that tightens the policy applies to the next list', async () => {
    h = await startHarness({ mode: 'stateless-json', config: { policy: POLICY } })
    const alice = await connect(h, 'alice')
    expect((await alice.listTools()).tools.map((t) => t.name).sort()).toEqual(['add', 'echo'])
    const rules = POLICY.rules.filter((r) => r.tool !== 'echo')
    h.gateway.reload(configFrom({ ...h.tree, policy: { ...POLICY, rules } }))
    expect((await alice.listTools()).tools.map((t) => t.name)).toEqual(['add'])
    await alice.close()
  })
})
