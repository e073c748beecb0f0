/**
 * The concurrency cap and what is not a request: the official SDK client (with a
 * sampling handler) through a real gateway to an official SDK server whose tools call sampling, with
 * the identity's cap filled by its own pending calls. The client's answers to the server (sampling
 * results, notifications/cancelled, notifications/initialized) must reach the server, and a session
 * opened at the cap must still get its GET stream.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { CreateMessageRequestSchema, CreateMessageResultSchema } from '@modelcontextprotocol/sdk/types.js'
import { type Harness, as, startHarness } from '../helpers/harness'
import { startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'
import { gate } from './raw-upstream'

const CAP = 3

/** What the upstream saw, for the test to wait on. */
interface Upstream {
  readonly url: string
  /** Tool calls of `hold` running now, and those whose request was cancelled. */
  holding: number
  cancelled: number
  /** Sessions the server saw notifications/initialized for. */
  initialized: number
  /** GET streams open now. */
  streams: number
  /** `ask` and `ask_on_stream` wait for this before they call sampling. */
  askGate: { wait: Promise<void>; open(): void }
  asking: number
  close(): Promise<void>
}

function text(s: string): { content: Array<{ type: 'text'; text: string }> } {
  return { content: [{ type: 'text', text: s }] }
}

/** A stateful SDK server on port 0: one McpServer per session, as the SDK's examples build it. */
async function startSamplingUpstream(): Promise<Upstream> {
  const servers: McpServer[] = []
  const state: Upstream = {
    url: '',
    holding: 0,
    cancelled: 0,
    initialized: 0,
    streams: 0,
    askGate: gate(),
    asking: 0,
    close: () => Promise.resolve(),
  }
  const build = (): McpServer => {
    const mcp = new McpServer({ name: 'sampling-upstream', version: '1.0.0' })
    mcp.registerTool('hold', { description: 'Runs until cancelled' }, (extra) => {
      state.holding++
      return new Promise((resolve) => {
        extra.signal.addEventListener('abort', () => {
          state.holding--
          state.cancelled++
          resolve(text('cancelled'))
        })
      })
    })
    // Sampling on the tool call's own SSE stream (a request related to the call).
    mcp.registerTool('ask', { description: 'Asks the client to sample' }, async (extra) => {
      state.asking++
      await state.askGate.wait
      const result = await extra.sendRequest(
        { method: 'sampling/createMessage', params: { messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 5 } },
        CreateMessageResultSchema,
      )
      return text(`sampled: ${result.content.type === 'text' ? result.content.text : '?'}`)
    })
    // Sampling on the session's standalone GET stream (no related request).
    mcp.registerTool('ask_on_stream', { description: 'Asks the client to sample on the GET stream' }, async () => {
      state.asking++
      await state.askGate.wait
      const result = await mcp.server.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 5 })
      return text(`sampled: ${result.content.type === 'text' ? result.content.text : '?'}`)
    })
    mcp.server.oninitialized = () => {
      state.initialized++
    }
    servers.push(mcp)
    return mcp
  }
  // Counts the open GET streams (the standalone stream a server's sampling request may go on).
  const upstream = await startSdkUpstream(build, {}, (req, res) => {
    if (req.method !== 'GET') return
    state.streams++
    res.on('close', () => state.streams--)
  })
  return Object.assign(state, {
    url: upstream.url,
    close: async () => {
      for (const mcp of servers) await mcp.close().catch(() => undefined)
      await upstream.close()
    },
  })
}

let upstream: Upstream
let h: Harness
const clients: Client[] = []

beforeEach(async () => {
  upstream = await startSamplingUpstream()
  h = await startHarness({ upstreamUrl: upstream.url, config: { max_concurrent_per_identity: CAP } })
})

afterEach(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => undefined)
  await h.close()
  await upstream.close()
})

/** An SDK client of alice@acme that answers sampling requests, with its GET stream open. */
async function connect(): Promise<Client> {
  const client = new Client({ name: 'sampler', version: '1.0.0' }, { capabilities: { sampling: {} } })
  client.setRequestHandler(CreateMessageRequestSchema, () => ({
    role: 'assistant',
    content: { type: 'text', text: 'from the client' },
    model: 'test-model',
  }))
  clients.push(client)
  const streamsBefore = upstream.streams
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice', 'acme') } }))
  await waitFor(() => upstream.streams === streamsBefore + 1, { what: "the session's GET stream open upstream" })
  return client
}

/** Fills alice's cap with `hold` calls (the GET stream holds one slot already). */
async function fillCap(client: Client, held: number, signal?: AbortSignal): Promise<Array<Promise<unknown>>> {
  const before = upstream.holding
  const calls = Array.from({ length: held }, () =>
    client.callTool({ name: 'hold', arguments: {} }, undefined, { signal, timeout: 60_000 }).catch((err: unknown) => err),
  )
  await waitFor(() => upstream.holding === before + held, { what: `${held} hold calls running upstream` })
  return calls
}

function textOf(result: unknown): string {
  return (result as { content: Array<{ text: string }> }).content[0].text
}

async function capIsFull(): Promise<boolean> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...as('alice', 'acme') },
    body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'ping' }),
  })
  await res.arrayBuffer()
  return res.status === 429
}

test.each(['ask', 'ask_on_stream'])(
  "at the cap, the client's answer to the server's sampling request (%s) reaches the server and the tool call completes",
  async (tool) => {
    const client = await connect() // the GET stream: slot 1
    const asked = client.callTool({ name: tool, arguments: {} }, undefined, { timeout: 15_000 }) // slot 2
    await waitFor(() => upstream.asking === 1, { what: `${tool} running upstream` })
    const held = await fillCap(client, CAP - 2) // slot 3: full
    expect(await capIsFull()).toBe(true)
    upstream.askGate.open()
    expect(textOf(await asked)).toBe('sampled: from the client')
    const answers = (await h.audit()).filter((e) => e.method === 'response')
    expect(answers.map((e) => [e.identity, e.decision, e.status])).toEqual([['alice', 'passthrough', 202]])
    await client.close()
    await Promise.all(held)
  },
)

test('at the cap, notifications/cancelled reaches the server and the cancelled call stops', async () => {
  const client = await connect()
  const controller = new AbortController()
  const held = await fillCap(client, CAP - 1, controller.signal)
  expect(await capIsFull()).toBe(true)
  controller.abort() // the SDK client sends notifications/cancelled for each
  await waitFor(() => upstream.cancelled === CAP - 1, { what: 'both calls cancelled upstream' })
  const entries = (await h.audit()).filter((e) => e.method === 'notifications/cancelled')
  expect(entries.map((e) => [e.decision, e.status])).toEqual(Array.from({ length: CAP - 1 }, () => ['passthrough', 202]))
  await Promise.all(held)
})

test('a session opened while the cap is full is initialized upstream and gets its GET stream', async () => {
  const first = await connect()
  const held = await fillCap(first, CAP - 1)
  expect(await capIsFull()).toBe(true)
  const initializedBefore = upstream.initialized
  await connect() // waits for its GET stream upstream
  await waitFor(() => upstream.initialized === initializedBefore + 1, { what: 'notifications/initialized of the second session upstream' })
  await first.close()
  await Promise.all(held)
})
