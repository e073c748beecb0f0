/**
 * Red team (the concurrency cap). On the legacy HTTP+SSE transport
 * (MCP 2024-11-05) the upstream answers a POST /messages?sessionId=… with 202 at once and runs the
 * call afterwards, sending its answer on the /sse stream. A cap that counted the POST only until that
 * 202 would let an identity with a cap of 2 run any number of tool calls at once upstream, each POST
 * "in flight" for a millisecond. The cap's promise, "at most max_concurrent_per_identity requests in
 * flight", must hold whatever the transport.
 */
import type { IncomingMessage } from 'node:http'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js'
import { type Harness, MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'

let h: Harness | undefined
afterEach(async () => {
  await h?.close()
  h = undefined
})

/** Collects an SSE stream's text as it arrives. */
function collect(res: IncomingMessage): { text: () => string } {
  let text = ''
  res.on('data', (c: Buffer) => (text += c.toString('utf8')))
  res.on('error', () => undefined)
  return { text: () => text }
}

test('legacy transport: tool calls running upstream count against the cap until their answer arrives on /sse', async () => {
  h = await startHarness({ config: { max_concurrent_per_identity: 2 } })
  const abort = new AbortController()
  const sse = await open(`${h.url}/sse`, { headers: { ...as('alice'), accept: 'text/event-stream' }, signal: abort.signal })
  expect(sse.statusCode).toBe(200)
  const stream = collect(sse)
  await waitFor(() => /sessionId=/.test(stream.text()), { what: 'the endpoint event' })
  const endpoint = /data: (\/messages\?sessionId=[^\r\n]+)/.exec(stream.text())![1]
  const post = (body: unknown): Promise<number> =>
    send(`${h!.url}${endpoint}`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, JSON.stringify(body)).then((r) => r.status)
  await post({
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'red', version: '1' } },
  })
  await waitFor(() => stream.text().includes('"id":0'), { what: 'the initialize answer' })
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' })
  // Six slow calls, one after the other: each takes 4 s upstream.
  const statuses: number[] = []
  for (let i = 1; i <= 6; i++) statuses.push(await post(toolCall('count_slowly', { n: 1, delay_ms: 4000 }, i)))
  const accepted = statuses.filter((s) => s === 202).length
  // Every accepted call ran: its answer arrives on the stream.
  await waitFor(() => (stream.text().match(/counted to 1/g) ?? []).length === accepted, {
    what: 'the answers of the accepted calls',
    timeoutMs: 20_000,
  })
  try {
    // The /sse stream holds one of alice's 2 slots: at most one call may run beside it.
    expect({ statuses, accepted: accepted <= 2 }).toEqual({ statuses, accepted: true })
  } finally {
    abort.abort()
  }
}, 30_000)

/**
 * The same on Streamable HTTP: MCP 2025-11-25 lets a server close a request's SSE stream early (SSE
 * polling; the official SDK's `extra.closeSSEStream()` with an event store) and deliver the answer
 * when the client resumes with Last-Event-ID. The POST, and its slot, end with the stream while the
 * tool keeps running.
 */
// Known limit (docs/gateway.md, "Known limits": SSE polling frees a call's slot early): a slot is
// counted only while its POST is open, so this still fails; test.failing keeps it honest until fixed.
const POLLING = 'Streamable HTTP with SSE polling: a tool still running after its stream closed counts against the cap'
test.failing(
  POLLING,
  async () => {
    let running = 0
    let most = 0
    const upstream = await startSdkUpstream(
      () => {
        const mcp = new McpServer({ name: 'polling', version: '1' })
        mcp.registerTool('slow', { description: 'closes its stream, then works 4 s' }, async (extra) => {
          running++
          most = Math.max(most, running)
          extra.closeSSEStream?.()
          await new Promise((resolve) => setTimeout(resolve, 4000)) // the tool's own work time: all six calls overlap in it
          running--
          return { content: [{ type: 'text', text: 'done' }] }
        })
        return mcp
      },
      { eventStore: new InMemoryEventStore(), retryInterval: 60_000 },
    )
    try {
      h = await startHarness({
        upstreamUrl: `${upstream.url}/mcp`,
        config: { max_concurrent_per_identity: 2 },
      })
      const url = `${h.url}/mcp`
      const headers = { ...as('alice'), ...MCP_HEADERS }
      const init = await send(
        url,
        'POST',
        headers,
        JSON.stringify({
          jsonrpc: '2.0',
          id: 0,
          method: 'initialize',
          params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'red', version: '1' } },
        }),
      )
      const session = { ...headers, 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-11-25' }
      await send(url, 'POST', session, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }))
      const statuses: number[] = []
      for (let i = 1; i <= 6; i++) statuses.push((await send(url, 'POST', session, JSON.stringify(toolCall('slow', {}, i)))).status)
      await waitFor(() => running === 0, { what: 'the tools to finish', timeoutMs: 30_000 })
      // At most 2 of alice's calls may run at once.
      expect({ statuses, most: most <= 2 ? 'within the cap' : most }).toEqual({ statuses, most: 'within the cap' })
    } finally {
      await upstream.close()
    }
  },
  60_000,
)
