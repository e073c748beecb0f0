/**
 * wardline_forwarded_calls_total{outcome,tool} and wardline_forwarded_call_duration_seconds{tool}
 * (operations.md, "Calls by tool"), read from a real gateway's /metrics: the official SDK client
 * calls tools of an official SDK server through it, and the counts are checked against the audit
 * trail the same requests wrote.
 */
import { randomBytes } from 'node:crypto'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { z } from 'zod'
import { MAX_LABELLED_NAMES } from '../../src/audit/metrics'
import { type RawUpstream, startRawUpstream } from './raw-upstream'
import { type Harness, MCP_HEADERS, as, metricSamples, rpc, startHarness, toolCall } from '../helpers/harness'
import { type SdkUpstream, startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'

/** The sum of the samples of `name` whose labels include `match` (0 when there are none). */
async function value(h: Harness, name: string, match: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${h.url}/metrics`)).text()
  return metricSamples(text, name)
    .filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0)
}

const CALLS = 'wardline_forwarded_calls_total'
const DURATION = 'wardline_forwarded_call_duration_seconds'

/** What the tools of the SDK server below wait for: the test opens it when it chooses. */
let gate: Promise<void> = Promise.resolve()

function buildServer(): McpServer {
  const mcp = new McpServer({ name: 'tools', version: '1.0.0' })
  const text = (t: string): { content: Array<{ type: 'text'; text: string }> } => ({ content: [{ type: 'text', text: t }] })
  mcp.registerTool('alpha', { inputSchema: { n: z.number().optional() } }, () => text('a'))
  mcp.registerTool('beta', {}, () => text('b'))
  mcp.registerTool('gamma', {}, () => text('g'))
  mcp.registerTool('slow', {}, async () => {
    await gate
    return text('slow')
  })
  mcp.registerTool('broken', {}, () => ({ ...text('it broke'), isError: true }))
  return mcp
}

/**
 * alpha, beta, slow, broken, limited and forbidden are named in the file (budget.tools or a rule);
 * gamma and every random name are not.
 */
const CONFIG = {
  features: { budget_enforcement: true },
  max_batch_messages: 1000,
  budget: {
    requests_per_window: 1_000_000,
    tools: { alpha: { requests_per_window: 1_000_000 }, slow: { requests_per_window: 1000 }, limited: { requests_per_window: 1 } },
  },
  policy: {
    default: 'allow',
    rules: [
      { identity: '*', tool: 'forbidden', effect: 'deny' },
      { identity: '*', tool: 'beta', effect: 'allow' },
      { identity: '*', tool: 'broken', effect: 'allow' },
    ],
  },
}
const CONFIGURED = ['alpha', 'slow', 'limited', 'forbidden', 'beta', 'broken']

async function post(h: Harness, body: unknown, identity = 'alice'): Promise<Response> {
  return fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as(identity) }, body: JSON.stringify(body) })
}

describe('calls by tool through a real gateway to an SDK server answering in SSE', () => {
  let upstream: SdkUpstream
  let h: Harness
  let client: Client
  beforeAll(async () => {
    // Stateless, so raw requests (batches) need no session; SSE answers, so the head leaves before the tool ends.
    upstream = await startSdkUpstream(buildServer, { sessionIdGenerator: undefined })
    h = await startHarness({ upstreamUrl: upstream.url, config: CONFIG })
    client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice') } }))
  })
  afterAll(async () => {
    await client.close()
    await h.close()
    await upstream.close()
  })

  test('seven calls of alpha and four of beta are counted under their names, each observed once, as the audit trail has them', async () => {
    for (let i = 0; i < 7; i++) await client.callTool({ name: 'alpha', arguments: { n: i } })
    for (let i = 0; i < 4; i++) await client.callTool({ name: 'beta', arguments: {} })
    const audit = (await h.audit()).filter((e) => e.method === 'tools/call' && e.decision === 'allow')
    expect(audit.filter((e) => e.tool === 'alpha').length).toBe(7)

    expect(await value(h, CALLS, { tool: 'alpha', outcome: 'ok' })).toBe(7)
    expect(await value(h, CALLS, { tool: 'beta', outcome: 'ok' })).toBe(4)
    expect(await value(h, `${DURATION}_count`, { tool: 'alpha' })).toBe(7)
    expect(await value(h, `${DURATION}_bucket`, { tool: 'beta', le: '+Inf' })).toBe(4)
    // initialize, its notification and tools/list went upstream too, but they are no gated calls.
    expect(await value(h, CALLS, {})).toBe(audit.length)
  })

  test('a tool no rule or budget names counts as other; tool results with isError (a failing tool, an unknown one) are ok (a 2xx answer)', async () => {
    const before = await value(h, CALLS, { tool: 'other', outcome: 'ok' })
    await client.callTool({ name: 'gamma', arguments: {} })
    expect((await client.callTool({ name: 'broken', arguments: {} })).isError).toBe(true)
    // The SDK server answers an unknown tool with a tool result too (isError), inside its 200 SSE answer.
    expect((await client.callTool({ name: 'no-such-tool', arguments: {} })).isError).toBe(true)
    expect(await value(h, CALLS, { tool: 'other', outcome: 'ok' })).toBe(before + 2)
    expect(await value(h, CALLS, { tool: 'broken', outcome: 'ok' })).toBe(1)
    expect(await value(h, CALLS, { tool: 'gamma' })).toBe(0)
  })

  test('refused calls are not counted as forwarded: a policy denial and a throttled call count only as refusals', async () => {
    expect((await post(h, toolCall('forbidden'))).status).toBe(403)
    expect((await post(h, toolCall('limited'))).status).toBe(200)
    expect((await post(h, toolCall('limited'))).status).toBe(429)
    await h.gateway.audit.flush()
    expect(await value(h, CALLS, { tool: 'forbidden' })).toBe(0)
    expect(await value(h, CALLS, { tool: 'limited' })).toBe(1)
    expect(await value(h, `${DURATION}_count`, { tool: 'limited' })).toBe(1)
    expect(await value(h, 'wardline_refusals_by_tool_total', { tool: 'forbidden', decision: 'deny' })).toBe(1)
    expect(await value(h, 'wardline_refusals_by_tool_total', { tool: 'limited', decision: 'throttled' })).toBe(1)
  })

  test('the latency runs to the end of the answer, not its first byte: a tool held 300 ms after the SSE head left is above 0.25 s', async () => {
    let open = (): void => undefined
    gate = new Promise((resolve) => (open = resolve))
    const started = performance.now()
    const res = await post(h, toolCall('slow'))
    // The head (200, text/event-stream) is here while the tool still waits: a first-byte timer would stop now.
    expect(res.headers.get('content-type')).toContain('text/event-stream')
    await new Promise((resolve) => setTimeout(resolve, 300)) // the tool's hold is the latency under test
    open()
    expect(await res.text()).toContain('slow')
    const elapsed = (performance.now() - started) / 1000
    await h.gateway.audit.flush()

    expect(await value(h, `${DURATION}_count`, { tool: 'slow' })).toBe(1)
    expect(await value(h, `${DURATION}_bucket`, { tool: 'slow', le: '0.25' })).toBe(0)
    expect(await value(h, `${DURATION}_bucket`, { tool: 'slow', le: '30' })).toBe(1)
    const sum = await value(h, `${DURATION}_sum`, { tool: 'slow' })
    expect(sum).toBeGreaterThanOrEqual(0.3)
    expect(sum).toBeLessThanOrEqual(elapsed) // upstream time only: no more than the client waited
  })

  test('a batch counts each gated element alone, with the batch duration, as its audit entries do; the ping in it is not counted', async () => {
    const alpha = await value(h, CALLS, { tool: 'alpha' })
    const beta = await value(h, CALLS, { tool: 'beta' })
    let open = (): void => undefined
    gate = new Promise((resolve) => (open = resolve))
    const batch = [toolCall('alpha', {}, 1), toolCall('alpha', {}, 2), toolCall('alpha', {}, 3), toolCall('beta', {}, 4)]
    const res = await post(h, [...batch, toolCall('slow', {}, 5), rpc('ping', undefined, 6)])
    expect(res.status).toBe(200)
    await new Promise((resolve) => setTimeout(resolve, 300)) // as above: the slow tool's hold is what the durations measure
    open()
    await res.text()
    await h.gateway.audit.flush()

    expect(await value(h, CALLS, { tool: 'alpha' })).toBe(alpha + 3)
    expect(await value(h, CALLS, { tool: 'beta' })).toBe(beta + 1)
    expect(await value(h, CALLS, { tool: 'slow' })).toBe(2)
    // The alpha calls of the batch waited for the slow one: their answer ended with the batch's.
    expect(await value(h, `${DURATION}_count`, { tool: 'alpha' })).toBe(alpha + 3)
    expect(await value(h, `${DURATION}_bucket`, { tool: 'alpha', le: '0.25' })).toBe(alpha)
    const entries = (await h.audit()).filter((e) => /\/[0-9]+$/.test(e.request_id) && e.method === 'tools/call')
    expect(entries.map((e) => e.tool).slice(-5)).toEqual(['alpha', 'alpha', 'alpha', 'beta', 'slow'])
  })

  test('1 200 tool names a caller invents (a batch of 1 000, 200 single calls) add no series: only configured names, other and none', async () => {
    const otherBefore = await value(h, CALLS, { tool: 'other' })
    const batch = Array.from({ length: 1000 }, (_, i) => toolCall(`t-${randomBytes(8).toString('hex')}`, {}, i))
    const res = await post(h, batch, 'mallory')
    // The SDK server takes batches of at most 100: its 400 is relayed, and each element is an http_error.
    expect(res.status).toBe(400)
    expect(await res.text()).toContain('Batch must not exceed 100')
    const singles = Array.from({ length: 200 }, () => `u-${randomBytes(8).toString('hex')}`)
    for (let i = 0; i < singles.length; i += 20) {
      await Promise.all(singles.slice(i, i + 20).map(async (name) => void (await (await post(h, toolCall(name), 'mallory')).text())))
    }
    // A gated call with no target (resources/list) is none.
    expect((await post(h, rpc('resources/list', {}))).status).toBe(200)
    await h.gateway.audit.flush()

    const text = await (await fetch(`${h.url}/metrics`)).text()
    const allowed = new Set([...CONFIGURED, 'other', 'none'])
    const calls = metricSamples(text, CALLS)
    const buckets = metricSamples(text, `${DURATION}_bucket`)
    for (const s of [...calls, ...buckets]) expect(allowed).toContain(s.labels.tool)
    expect(calls.reduce((n, s) => n + (s.labels.tool === 'other' ? s.value : 0), 0)).toBe(otherBefore + 1200)
    expect(calls.find((s) => s.labels.tool === 'other' && s.labels.outcome === 'http_error')?.value).toBe(1000)
    expect(calls.find((s) => s.labels.tool === 'none')?.value).toBe(1)
    // The bound the docs state: (configured names + other + none) × outcomes, and × (buckets + 1) for the histogram.
    expect(calls.length).toBeLessThanOrEqual((CONFIGURED.length + 2) * 4)
    expect(buckets.length).toBeLessThanOrEqual((CONFIGURED.length + 2) * 15)
    expect(text.length).toBeLessThan(30_000)
    expect(MAX_LABELLED_NAMES).toBe(250)
  })
})

describe('outcomes: what the gateway knows without reading the answer', () => {
  let upstream: RawUpstream
  let h: Harness
  beforeAll(async () => {
    upstream = await startRawUpstream((_req, res, seen) => {
      const body = seen.body
      if (body.includes('"answers_500"')) {
        res.writeHead(500, { 'content-type': 'application/json' })
        return void res.end('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}')
      }
      if (body.includes('"resets"')) return void res.socket?.destroy()
      if (body.includes('"hangs"')) return // never answers: the client gives up
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"jsonrpc":"2.0","id":1,"result":{"content":[]}}')
    })
    h = await startHarness({
      upstreamUrl: upstream.url,
      config: {
        budget: { tools: Object.fromEntries(['answers_500', 'resets', 'hangs', 'fine'].map((t) => [t, { requests_per_window: 100 }])) },
      },
    })
  })
  afterAll(async () => {
    await h.close()
    await upstream.close()
  })

  test('a 2xx is ok, another status http_error, a reset upstream_error (502), a client that left client_closed', async () => {
    expect((await post(h, toolCall('fine'))).status).toBe(200)
    expect((await post(h, toolCall('answers_500'))).status).toBe(500)
    const reset = await post(h, [toolCall('resets', {}, 1), toolCall('resets', {}, 2)])
    expect(reset.status).toBe(502)
    const leaving = new AbortController()
    const hung = fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('hangs')),
      signal: leaving.signal,
    }).catch((err: unknown) => err)
    await waitFor(() => upstream.seen.some((s) => s.body.includes('"hangs"')), { what: 'the hanging call to reach the upstream' })
    expect(await value(h, CALLS, { tool: 'hangs' })).toBe(0) // counted when it ends, not before
    leaving.abort()
    expect(await hung).toMatchObject({ name: 'AbortError' })
    await waitFor(async () => (await value(h, CALLS, { tool: 'hangs', outcome: 'client_closed' })) === 1, {
      what: 'the abandoned call counted as client_closed',
    })

    expect(await value(h, CALLS, { tool: 'fine', outcome: 'ok' })).toBe(1)
    expect(await value(h, CALLS, { tool: 'answers_500', outcome: 'http_error' })).toBe(1)
    expect(await value(h, CALLS, { tool: 'resets', outcome: 'upstream_error' })).toBe(2)
    // The same batch is one upstream error (a request) and two error entries (calls).
    expect(await value(h, 'wardline_upstream_errors_total', { kind: 'reset' })).toBe(1)
    expect(await value(h, 'wardline_refusals_by_tool_total', { tool: 'resets', decision: 'error' })).toBe(2)
  })
})
