import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { MCP_HEADERS, as, configFrom, metricSamples, rpc, startHarness, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { waitFor } from '../helpers/wait'

/** Metrics with several servers: `server` on every series of a routed request, none on the rest, and a removed server's series gone. */

async function scrape(h: { url: string }): Promise<string> {
  return (await fetch(`${h.url}/metrics`)).text()
}

/** `name{labels}` → value for every sample of `name` in `text`, labels sorted, so a test compares whole sets. */
function series(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const s of metricSamples(text, name)) {
    const labels = Object.entries(s.labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k}=${v}`)
      .join(',')
    out[labels] = s.value
  }
  return out
}

async function callEcho(h: ServersHarness, name: string, times: number): Promise<void> {
  const client = new Client({ name: 't', version: '1' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp/${name}`), { requestInit: { headers: as('alice') } }))
  for (let i = 0; i < times; i++) await client.callTool({ name: 'echo', arguments: { text: 'x' } })
  await client.close()
}

describe('metrics by server', () => {
  let h: ServersHarness
  beforeAll(async () => {
    // echo named in a rule, so it is a tool label of its own rather than `other`.
    h = await startServersHarness(
      { docs: {}, tickets: {} },
      {
        policy: {
          default: 'allow',
          rules: [
            { identity: '*', tool: 'echo', effect: 'allow' },
            { identity: '*', tool: 'add', effect: 'deny' },
          ],
        },
      },
    )
    await callEcho(h, 'docs', 2)
    await callEcho(h, 'tickets', 1)
    const client = new Client({ name: 't', version: '1' })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp/tickets`), { requestInit: { headers: as('alice') } }))
    const denied = (await client.callTool({ name: 'add', arguments: { a: 1, b: 2 } }).catch((err: unknown) => err)) as { isError?: boolean }
    expect(denied).toBeDefined()
    await client.close()
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(rpc('tools/list')), '/mcp/nope')
    expect(reply.status).toBe(404)
  })
  afterAll(() => h.close())

  test('forwarded calls, their latency, requests and refusals carry the server they went to', async () => {
    const text = await scrape(h)
    expect(series(text, 'wardline_forwarded_calls_total')).toEqual({
      'outcome=ok,server=docs,tool=echo': 2,
      'outcome=ok,server=tickets,tool=echo': 1,
    })
    expect(series(text, 'wardline_forwarded_call_duration_seconds_count')).toEqual({
      'server=docs,tool=echo': 2,
      'server=tickets,tool=echo': 1,
    })
    expect(series(text, 'wardline_refusals_by_tool_total')).toEqual({
      // The path naming no server: refused before any route, so no server label.
      'decision=error,tool=none': 1,
      'decision=deny,server=tickets,tool=add': 1,
    })
    const requests = series(text, 'wardline_requests_total')
    expect(requests['decision=error']).toBe(1)
    expect(requests['decision=deny,server=tickets']).toBe(1)
    expect(requests['decision=allow,server=docs']).toBe(2)
    expect(requests['decision=allow,server=tickets']).toBe(1)
    // initialize, its notification, the session's DELETE: each with its server too.
    expect(requests['decision=passthrough,server=docs']).toBeGreaterThanOrEqual(2)
    expect(requests['decision=allow']).toBeUndefined()
    expect(requests['decision=passthrough']).toBeUndefined()
    expect(Object.keys(series(text, 'wardline_request_duration_seconds_count')).sort()).toEqual(Object.keys(requests).sort())
    // Failure series per server, at 0 from the start; none without a server (there is no `upstream:`).
    const errors = series(text, 'wardline_upstream_errors_total')
    expect(Object.keys(errors)).toHaveLength(10)
    expect(errors['kind=unreachable,server=docs']).toBe(0)
    expect(errors['kind=timeout,server=tickets']).toBe(0)
    expect(Object.keys(errors).every((k) => k.includes('server='))).toBe(true)
  })

  test('a reload that changes a server keeps its counts; one that removes a server drops its series once its route closes', async () => {
    const tree = h.tree as { servers: Record<string, Record<string, unknown>> }
    const changed = { ...tree, servers: { ...tree.servers, docs: { ...tree.servers.docs, timeout_seconds: 7 } } }
    h.gateway.reload(configFrom(changed))
    // The old docs route closes once idle (0.5 s polls): its counts stay with the new one.
    await new Promise((resolve) => setTimeout(resolve, 1200))
    await callEcho(h, 'docs', 1)
    let text = await scrape(h)
    expect(series(text, 'wardline_forwarded_calls_total')['outcome=ok,server=docs,tool=echo']).toBe(3)
    expect(series(text, 'wardline_upstream_errors_total')['kind=unreachable,server=docs']).toBe(0)

    h.gateway.reload(configFrom({ ...changed, servers: { docs: changed.servers.docs } }))
    text = await waitFor(
      async () => {
        const t = await scrape(h)
        return t.includes('server="tickets"') ? null : t
      },
      { what: "tickets' series to go" },
    )
    expect(series(text, 'wardline_forwarded_calls_total')).toEqual({ 'outcome=ok,server=docs,tool=echo': 3 })
    expect(Object.keys(series(text, 'wardline_upstream_errors_total'))).toHaveLength(5)
    // Added back, it starts again from 0, at 0 from the start.
    h.gateway.reload(configFrom(changed))
    text = await scrape(h)
    expect(series(text, 'wardline_upstream_errors_total')['kind=unreachable,server=tickets']).toBe(0)
    expect(series(text, 'wardline_forwarded_calls_total')['outcome=ok,server=tickets,tool=echo']).toBeUndefined()
  })
})

test('with upstream: alone, no series has a server label', async () => {
  const h = await startHarness({ mode: 'stateless-json', config: { upstream_health_check: { interval_seconds: 0.05 } } })
  try {
    const res = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('echo', { text: 'x' })),
    })
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    const text = await scrape(h)
    expect(text).toContain('wardline_upstream_up 1')
    expect(text).toContain('wardline_upstream_errors_total{kind="unreachable"} 0')
    expect(text).toMatch(/wardline_forwarded_calls_total\{outcome="ok",tool="other"\} 1/)
    expect(text).not.toContain('server=')
  } finally {
    await h.close()
  }
})
