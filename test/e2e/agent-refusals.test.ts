/**
 * tool_refusals: result through the whole gateway, read by the official SDK client the way an agent
 * host reads it: a refused tools/call (over budget, denied by policy, past the concurrency cap) comes
 * back as a tool result with isError that `callTool` returns instead of throwing, over every server
 * mode. With the default (http) the same refusals stay HTTP errors.
 */
import { dirname } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { ExampleMode } from '../../examples/mcp-server'
import { type Harness, MCP_HEADERS, as, configFrom, startHarness, toolCall } from '../helpers/harness'

/** What the client's fetch saw of one POST: enough to check status and headers of a refusal. */
interface Seen {
  readonly status: number
  readonly headers: Headers
}

/** The SDK client as an agent host uses it, with a fetch that records every response (and can ask for SSE only). */
async function connect(h: Harness, identity = 'alice'): Promise<{ client: Client; seen: Seen[]; sseOnly: { on: boolean } }> {
  const seen: Seen[] = []
  const sseOnly = { on: false }
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), {
    requestInit: { headers: as(identity, 'acme') },
    fetch: async (url, init) => {
      let request = init
      // A client that accepts only SSE: for the calls the gateway answers itself (an SDK server
      // would answer 406 to such a POST, so only while a test says so).
      if (sseOnly.on && init?.method === 'POST') {
        const headers = new Headers(init.headers)
        headers.set('accept', 'text/event-stream')
        request = { ...init, headers }
      }
      const res = await fetch(url, request)
      if (init?.method === 'POST') seen.push({ status: res.status, headers: res.headers })
      return res
    },
  })
  const client = new Client({ name: 'agent', version: '1.0.0' })
  await client.connect(transport)
  return { client, seen, sseOnly }
}

interface ToolResult {
  content: Array<{ type: string; text: string }>
  isError?: boolean
  _meta?: Record<string, unknown>
}

const BUDGET = {
  features: { budget_enforcement: true },
  budget: { requests_per_window: 100, window_seconds: 60, tools: { expensive_tool: { requests_per_window: 2, window_seconds: 60 } } },
  policy: { default: 'allow', rules: [{ identity: 'alice', tool: 'add', effect: 'deny' }] },
}

describe.each<ExampleMode>(['stateful', 'stateless-json', 'stateless-sse'])('tool_refusals: result (%s upstream)', (mode) => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode, config: { ...BUDGET, tool_refusals: 'result' } })
  })
  afterEach(async () => {
    await h.close()
  })

  test('a call over budget returns a result with isError that names the limit and the wait, and the client goes on', async () => {
    const { client, seen } = await connect(h)
    for (let i = 0; i < 2; i++) expect((await client.callTool({ name: 'expensive_tool', arguments: {} })).isError).toBeFalsy()
    const refused = (await client.callTool({ name: 'expensive_tool', arguments: {} })) as ToolResult
    expect(refused.isError).toBe(true)
    expect(refused.content).toHaveLength(1)
    expect(refused.content[0].type).toBe('text')
    expect(refused.content[0].text).toMatch(/^Rate limit: 2 calls per 60 s for tool "expensive_tool"\. Try again in \d+ s\.$/)
    const wait = refused._meta?.retry_after_seconds
    expect(typeof wait).toBe('number')
    expect(refused.content[0].text).toContain(`Try again in ${String(wait)} s.`)
    expect(refused._meta).toEqual({ retry_after_seconds: wait, bucket: 'tool', decision: 'throttled' })

    // HTTP 200 as JSON, with the RateLimit fields of a 429 and no session id of its own.
    const response = seen[seen.length - 1]
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toBe('application/json')
    expect(response.headers.get('retry-after')).toBe(String(wait))
    expect(response.headers.get('ratelimit')).toMatch(/"tool";r=0;t=\d+/)
    expect(response.headers.get('ratelimit-policy')).toContain('"tool";q=2;w=60')
    expect(response.headers.get('x-wardline-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    expect(response.headers.get('mcp-session-id')).toBeNull()

    // The session (or the stateless client) still works.
    expect((await client.callTool({ name: 'echo', arguments: { text: 'still here' } })).content).toEqual([
      { type: 'text', text: 'still here' },
    ])
    await client.close()

    const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
    expect(calls.map((e) => [e.tool, e.decision, e.status])).toEqual([
      ['expensive_tool', 'allow', 200],
      ['expensive_tool', 'allow', 200],
      ['expensive_tool', 'throttled', 200],
      ['echo', 'allow', 200],
    ])
    expect(calls[2].reason).toBe('rate limit exceeded: tool bucket, 2 requests per 60s window')
  })

  test('a call denied by policy returns a result with isError that names the tool and never the rule', async () => {
    const { client, seen } = await connect(h)
    const posts = () => h.upstream.seen.filter((r) => r.method === 'POST').length
    const before = posts()
    const denied = (await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } })) as ToolResult
    expect(posts()).toBe(before) // never forwarded
    expect(denied).toEqual({
      content: [{ type: 'text', text: 'Tool "add" is not allowed for you by policy. Do not retry it.' }],
      isError: true,
      _meta: { decision: 'deny' },
    })
    expect(seen[seen.length - 1].status).toBe(200)
    await client.close()
    const entry = (await h.audit()).find((e) => e.method === 'tools/call')
    expect(entry).toMatchObject({ tool: 'add', decision: 'deny', status: 200, reason: 'rule 0' })
  })

  test('a client that accepts only SSE gets the result as one SSE event, and the SDK reads it', async () => {
    const { client, seen, sseOnly } = await connect(h)
    sseOnly.on = true
    const denied = (await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } })) as ToolResult
    sseOnly.on = false
    expect(denied.isError).toBe(true)
    expect(denied.content[0].text).toBe('Tool "add" is not allowed for you by policy. Do not retry it.')
    expect(seen[seen.length - 1].status).toBe(200)
    expect(seen[seen.length - 1].headers.get('content-type')).toBe('text/event-stream')
    await client.close()
  })
})

describe('tool_refusals: result, on the wire', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { ...BUDGET, tool_refusals: 'result' } })
  })
  afterAll(async () => {
    await h.close()
  })

  const post = (body: unknown, accept = MCP_HEADERS.accept, identity = 'alice') =>
    fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, accept, ...as(identity) }, body: JSON.stringify(body) })

  test('an SSE answer is exactly one message event holding the result', async () => {
    const res = await post(toolCall('add', { a: 1, b: 2 }, 'x-1'), 'text/event-stream')
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/event-stream')
    const text = await res.text()
    expect(text).toMatch(/^event: message\ndata: \{.*\}\n\n$/)
    expect(JSON.parse(text.slice(text.indexOf('data: ') + 6))).toEqual({
      jsonrpc: '2.0',
      id: 'x-1',
      result: {
        content: [{ type: 'text', text: 'Tool "add" is not allowed for you by policy. Do not retry it.' }],
        isError: true,
        _meta: { decision: 'deny' },
      },
    })
  })

  test('a batch, a notification and a POST that lists neither JSON nor SSE keep the HTTP form', async () => {
    const batch = await post([toolCall('add', { a: 1, b: 2 }, 1)])
    expect(batch.status).toBe(403)
    expect(((await batch.json()) as { error: { code: number } }).error.code).toBe(403)
    const notification = await post({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'add' } })
    expect(notification.status).toBe(403)
    expect(await notification.text()).toBe('')
    // The legacy HTTP+SSE transport's POSTs send */*: their answers travel on the /sse stream.
    const legacy = await post(toolCall('add', { a: 1, b: 2 }), '*/*')
    expect(legacy.status).toBe(403)
  })
})

describe.each<ExampleMode>(['stateful', 'stateless-json', 'stateless-sse'])('tool_refusals: http, the default (%s upstream)', (mode) => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode, config: BUDGET })
  })
  afterEach(async () => {
    await h.close()
  })

  test('over budget and denied calls still throw the 429 and the 403 and are audited with those statuses', async () => {
    const { client } = await connect(h)
    for (let i = 0; i < 2; i++) await client.callTool({ name: 'expensive_tool', arguments: {} })
    const throttled = await client.callTool({ name: 'expensive_tool', arguments: {} }).catch((err: unknown) => err)
    expect(throttled).toBeInstanceOf(StreamableHTTPError)
    expect((throttled as StreamableHTTPError).code).toBe(429)
    const denied = await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } }).catch((err: unknown) => err)
    expect((denied as StreamableHTTPError).code).toBe(403)
    await client.close()
    const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
    expect(calls.map((e) => [e.tool, e.decision, e.status])).toEqual([
      ['expensive_tool', 'allow', 200],
      ['expensive_tool', 'allow', 200],
      ['expensive_tool', 'throttled', 429],
      ['add', 'deny', 403],
    ])
  })
})

describe('tool_refusals: result past the concurrency cap', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateless-sse', config: { tool_refusals: 'result', max_concurrent_per_identity: 1 } })
  })
  afterEach(async () => {
    await h.close()
  })

  test("a call past the caller's cap returns a result with isError saying when to retry", async () => {
    // A standalone SSE stream holds the only slot until the test closes it.
    const hold = new AbortController()
    const held = await fetch(`${h.url}/mcp`, { headers: { accept: 'text/event-stream', ...as('carol') }, signal: hold.signal })
    expect(held.status).toBe(200)
    try {
      // initialize may go past the cap; the client's other requests are refused (its GET stream too).
      const { client } = await connect(h, 'carol')
      const refused = (await client.callTool({ name: 'echo', arguments: { text: 'hi' } })) as ToolResult
      expect(refused).toEqual({
        content: [{ type: 'text', text: 'Too many calls in flight for you (cap 1). Retry when one of your calls finishes.' }],
        isError: true,
        _meta: { retry_after_seconds: 1, decision: 'throttled' },
      })
      await client.close()
    } finally {
      hold.abort()
    }
    const entry = (await h.audit()).find((e) => e.method === 'tools/call' && e.tool === 'echo')
    expect(entry).toMatchObject({ decision: 'throttled', status: 200 })
    expect(entry?.reason).toMatch(/^concurrency limit: 1 requests in flight/)
  })
})

describe('tool_refusals at a reload', () => {
  test('applies to requests that start after it, without a restart', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: BUDGET })
    try {
      const call = () =>
        fetch(`${h.url}/mcp`, {
          method: 'POST',
          headers: { ...MCP_HEADERS, ...as('alice') },
          body: JSON.stringify(toolCall('add', { a: 1, b: 2 })),
        })
      expect((await call()).status).toBe(403)
      expect(h.gateway.reload(configFrom({ ...h.tree, tool_refusals: 'result' }, {}, dirname(h.auditFile)))).toEqual([])
      const res = await call()
      expect(res.status).toBe(200)
      expect(await res.json()).toMatchObject({ result: { isError: true, _meta: { decision: 'deny' } } })
    } finally {
      await h.close()
    }
  })
})
