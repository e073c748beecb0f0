/**
 * An agent's whole experience through the gateway, with the official SDK client and server, over
 * every transport (Streamable HTTP against JSON, SSE and stateful servers, and the legacy HTTP+SSE
 * transport): it lists its tools and sees only the ones it may call, calls one past its budget and
 * reads the refusal as a tool result, without catching an exception.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import type { ExampleMode } from '../../examples/mcp-server'
import { type Harness, as, startHarness } from '../helpers/harness'

const CONFIG = {
  tool_refusals: 'result',
  features: { budget_enforcement: true },
  budget: { requests_per_window: 100, window_seconds: 60, tools: { expensive_tool: { requests_per_window: 2, window_seconds: 60 } } },
  policy: {
    default: 'deny',
    rules: [
      { identity: 'agent-7', tool: 'expensive_tool', effect: 'allow' },
      { identity: 'agent-7', tool: 'echo', effect: 'allow' },
    ],
  },
}

interface ToolResult {
  content: Array<{ type: string; text: string }>
  isError?: boolean
  _meta?: Record<string, unknown>
}

type Setup = { transport: 'streamable'; mode: ExampleMode } | { transport: 'legacy'; mode: 'stateful' }

const SETUPS: Setup[] = [
  { transport: 'streamable', mode: 'stateless-json' },
  { transport: 'streamable', mode: 'stateless-sse' },
  { transport: 'streamable', mode: 'stateful' },
  { transport: 'legacy', mode: 'stateful' },
]

describe.each(SETUPS)('an agent through the gateway ($transport transport, $mode server)', (setup) => {
  let h: Harness
  let client: Client
  beforeEach(async () => {
    h = await startHarness({ mode: setup.mode, config: CONFIG })
    const headers = as('agent-7')
    const transport: Transport =
      setup.transport === 'legacy'
        ? new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers } })
        : new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers } })
    client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(transport)
  })
  afterEach(async () => {
    await client.close()
    await h.close()
  })

  test('lists only what it may call, and reads a budget refusal as a result', async () => {
    const tools = (await client.listTools()).tools.map((t) => t.name).sort()
    expect(tools).toEqual(['echo', 'expensive_tool'])

    const results: ToolResult[] = []
    // No try/catch: every call resolves, the refused one with isError.
    for (let i = 0; i < 3; i++) results.push((await client.callTool({ name: 'expensive_tool', arguments: {} })) as ToolResult)
    expect(results.map((r) => r.isError ?? false)).toEqual([false, false, true])
    const refused = results[2]
    expect(refused.content[0].text).toMatch(/^Rate limit: 2 calls per 60 s for tool "expensive_tool"\. Try again in \d+ s\.$/)
    expect(refused._meta).toMatchObject({ bucket: 'tool', decision: 'throttled' })
    expect(typeof refused._meta?.retry_after_seconds).toBe('number')

    // A tool it never saw listed is refused the same readable way.
    const denied = (await client.callTool({ name: 'whoami', arguments: {} })) as ToolResult
    expect(denied.isError).toBe(true)
    expect(denied.content[0].text).toContain('whoami')
    expect(denied._meta).toMatchObject({ decision: 'deny' })

    // The session goes on.
    const echoed = (await client.callTool({ name: 'echo', arguments: { text: 'still here' } })) as ToolResult
    expect(echoed.content[0].text).toBe('still here')

    const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
    expect(calls.map((e) => [e.tool, e.decision])).toEqual([
      ['expensive_tool', 'allow'],
      ['expensive_tool', 'allow'],
      ['expensive_tool', 'throttled'],
      ['whoami', 'deny'],
      ['echo', 'allow'],
    ])
    expect(calls[2].reason).toMatch(/^rate limit exceeded: tool bucket/)
    expect(calls[3].reason).toBe('default')
  })
})

describe('a call both over budget and denied by policy', () => {
  test('is audited as throttled with the reason of the window that refused it, not the policy rule', async () => {
    const h = await startHarness({
      mode: 'stateless-json',
      config: { ...CONFIG, tool_refusals: 'http', budget: { requests_per_window: 1, window_seconds: 60 } },
    })
    try {
      const post = (name: string): Promise<Response> =>
        fetch(`${h.url}/mcp`, {
          method: 'POST',
          headers: { ...as('agent-7'), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: { text: 'x' } } }),
        })
      expect((await post('echo')).status).toBe(200)
      expect((await post('whoami')).status).toBe(429)
      const last = (await h.audit()).filter((e) => e.method === 'tools/call').pop()
      expect(last).toMatchObject({ tool: 'whoami', decision: 'throttled', status: 429 })
      expect(last?.reason).toMatch(/^rate limit exceeded: identity bucket/)
    } finally {
      await h.close()
    }
  })
})
