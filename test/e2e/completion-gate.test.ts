/**
 * Every gated method is gated: the official SDK client, through a real gateway,
 * to official-SDK servers. completion/complete is judged as the prompts/get or resources/read it
 * completes; a task-augmented tools/call (MCP 2025-11-25, Tasks) is judged like any tools/call, and
 * tasks/get, tasks/result, tasks/list and tasks/cancel pass through as passthrough.
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js'
import type { ExampleMode } from '../../examples/mcp-server'
import type { AuditEntry } from '../../src/audit/entry'
import { type Harness, MCP_HEADERS, as, rpc, startHarness } from '../helpers/harness'

const POLICY = {
  default: 'deny',
  rules: [
    { identity: 'intern-*', method: 'prompts/get', tool: 'greeting', effect: 'deny' }, // rule 0
    { identity: '*', method: 'prompts/get', tool: 'greeting', effect: 'allow' }, // rule 1
    { identity: 'intern-*', method: 'resources/read', tool: 'example://notes/*', effect: 'deny' }, // rule 2
    { identity: '*', method: 'resources/read', tool: 'example://*', effect: 'allow' }, // rule 3
    { identity: '*', method: 'tools/call', tool: 'report', effect: 'allow' }, // rule 4
  ],
}

async function connect(url: string, identity: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers: as(identity) } })
  const client = new Client({ name: 'e2e', version: '1.0.0' })
  await client.connect(transport)
  return client
}

/**
 * Runs `act`; returns the audit entries of the POSTs it sent and how many POSTs reached the upstream
 * meanwhile. The SDK client's GET stream opens and closes on its own schedule, so GETs are left out.
 */
async function observe(h: Harness, act: () => Promise<void>): Promise<{ entries: AuditEntry[]; upstreamRequests: number }> {
  const posts = (): number => h.upstream.seen.filter((r) => r.method === 'POST').length
  const before = (await h.audit()).length
  const postsBefore = posts()
  await act()
  const entries = (await h.audit()).slice(before).filter((e) => e.method !== 'GET')
  return { entries, upstreamRequests: posts() - postsBefore }
}

/** What the SDK client throws for a refusal: its HTTP status. */
async function refusedStatus(call: Promise<unknown>): Promise<number> {
  const err = await call.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(StreamableHTTPError)
  return (err as StreamableHTTPError).code ?? 0
}

describe.each<ExampleMode>(['stateful', 'stateless-json'])('completion/complete through the gateway (%s upstream)', (mode) => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode, config: { policy: POLICY } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a completion for a prompt the caller may not get is refused with 403, never reaches the server, and is audited once as deny', async () => {
    const client = await connect(h.url, 'intern-sam')
    const { entries, upstreamRequests } = await observe(h, async () => {
      const completion = client.complete({ ref: { type: 'ref/prompt', name: 'greeting' }, argument: { name: 'name', value: 'Al' } })
      expect(await refusedStatus(completion)).toBe(403)
    })
    await client.close()
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({
        identity: 'intern-sam',
        method: 'completion/complete',
        tool: 'greeting',
        decision: 'deny',
        status: 403,
        reason: 'rule 0',
      }),
    ])
  })

  test("a completion for a prompt the caller may get returns the server's completions, audited as allow", async () => {
    const client = await connect(h.url, 'alice')
    let values: string[] = []
    const { entries } = await observe(h, async () => {
      const result = await client.complete({ ref: { type: 'ref/prompt', name: 'greeting' }, argument: { name: 'name', value: 'Al' } })
      values = result.completion.values
    })
    await client.close()
    expect(values).toEqual(['Alice', 'Alan'])
    expect(entries).toEqual([
      expect.objectContaining({ identity: 'alice', method: 'completion/complete', tool: 'greeting', decision: 'allow', status: 200 }),
    ])
  })

  test('a completion for a resource template is judged by the template text as resources/read', async () => {
    // The SDK server finds a template by its exact text, braces and all: that text is what the client sends.
    const ref = { type: 'ref/resource' as const, uri: 'example://notes/{id}' }
    const alice = await connect(h.url, 'alice')
    const intern = await connect(h.url, 'intern-sam')
    const { entries } = await observe(h, async () => {
      expect((await alice.complete({ ref, argument: { name: 'id', value: '1' } })).completion.values).toEqual(['1', '10'])
      expect(await refusedStatus(intern.complete({ ref, argument: { name: 'id', value: '1' } }))).toBe(403)
    })
    await alice.close()
    await intern.close()
    expect(entries.map((e) => [e.identity, e.method, e.tool, e.decision, e.status, e.reason])).toEqual([
      ['alice', 'completion/complete', 'example://notes/{id}', 'allow', 200, undefined],
      ['intern-sam', 'completion/complete', 'example://notes/{id}', 'deny', 403, 'rule 2'],
    ])
  })

  test('a completion that names nothing to judge is refused with 400 and one audit entry', async () => {
    const { entries, upstreamRequests } = await observe(h, async () => {
      const res = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(rpc('completion/complete', { argument: { name: 'name', value: 'Al' } }, 5)),
      })
      expect(res.status).toBe(400)
      expect(await res.json()).toMatchObject({ id: 5, error: { code: -32600 } })
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({
        method: 'POST',
        decision: 'error',
        status: 400,
        reason: 'completion/complete needs params.ref as an object',
      }),
    ])
  })
})

interface TaskServer {
  readonly url: string
  /** Tool names whose createTask ran: what the server actually started. */
  readonly started: string[]
  /** Each JSON-RPC request the server received, with the identity the gateway forwarded. */
  readonly seen: Array<{ method: string; identity: string | undefined }>
  close(): Promise<void>
}

/**
 * An official-SDK server (stateful Streamable HTTP) with two task-capable tools, built with the SDK's
 * experimental tasks API and its InMemoryTaskStore. Each tool's task completes at once.
 */
async function startTaskServer(): Promise<TaskServer> {
  const store = new InMemoryTaskStore()
  const started: string[] = []
  const seen: TaskServer['seen'] = []
  const sessions = new Map<string, StreamableHTTPServerTransport>()
  const build = (): McpServer => {
    const mcp = new McpServer(
      { name: 'task-server', version: '1.0.0' },
      { capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }, taskStore: store },
    )
    for (const name of ['report', 'secret_report']) {
      mcp.experimental.tasks.registerToolTask(
        name,
        { description: `Builds the ${name} in the background`, execution: { taskSupport: 'optional' } },
        {
          createTask: async (extra) => {
            started.push(name)
            // A short poll interval: the client polls tasks/get before it fetches the result.
            const task = await extra.taskStore.createTask({ ttl: 60_000, pollInterval: 5 })
            await extra.taskStore.storeTaskResult(task.taskId, 'completed', { content: [{ type: 'text', text: `${name} done` }] })
            return { task }
          },
          getTask: (extra) => extra.taskStore.getTask(extra.taskId),
          getTaskResult: async (extra) => (await extra.taskStore.getTaskResult(extra.taskId)) as { content: [] },
        },
      )
    }
    return mcp
  }
  const readJson = async (req: IncomingMessage): Promise<unknown> => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    return chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString('utf8'))
  }
  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = req.method === 'POST' ? await readJson(req) : undefined
      for (const m of Array.isArray(body) ? body : body === undefined ? [] : [body]) {
        const method = (m as { method?: string }).method
        if (method !== undefined) seen.push({ method, identity: req.headers['x-wardline-identity'] as string | undefined })
      }
      const id = req.headers['mcp-session-id']
      let transport = typeof id === 'string' ? sessions.get(id) : undefined
      if (transport === undefined) {
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => void sessions.set(sid, created),
        })
        transport = created
        await build().connect(created)
      }
      await transport.handleRequest(req, res, body)
    })().catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500)
      res.end(String(err))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    started,
    seen,
    close: async () => {
      for (const t of sessions.values()) await t.close().catch(() => undefined)
      store.cleanup()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

describe('tasks (MCP 2025-11-25) through the gateway', () => {
  let upstream: TaskServer
  let h: Harness
  beforeAll(async () => {
    upstream = await startTaskServer()
    h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
  })
  afterAll(async () => {
    await h.close()
    await upstream.close()
  })

  test('a task-augmented tools/call is judged and audited like any tools/call; its polling passes through', async () => {
    const client = await connect(h.url, 'alice')
    const before = (await h.audit()).length
    const kinds: string[] = []
    let text = ''
    for await (const message of client.experimental.tasks.callToolStream({ name: 'report', arguments: {} }, CallToolResultSchema, {
      task: { ttl: 60_000 },
    })) {
      kinds.push(message.type)
      if (message.type === 'result') text = (message.result.content[0] as { text: string }).text
    }
    await client.close()
    expect(kinds).toEqual(['taskCreated', 'taskStatus', 'result'])
    expect(text).toBe('report done')
    expect(upstream.started).toContain('report')
    const entries = (await h.audit()).slice(before).filter((e) => e.method.startsWith('tools/') || e.method.startsWith('tasks/'))
    expect(entries.map((e) => [e.method, e.tool, e.decision, e.status])).toEqual([
      ['tools/call', 'report', 'allow', 200],
      ['tasks/get', '', 'passthrough', 200],
      ['tasks/result', '', 'passthrough', 200],
    ])
    // The server gets the verified identity on every task request: what it must bind tasks to
    // (the spec's "authorization context"), since the gateway does not.
    const polls = upstream.seen.filter((s) => s.method.startsWith('tasks/'))
    expect(polls.length).toBeGreaterThanOrEqual(2)
    for (const s of polls) expect(s.identity).toBe('alice')
  })

  test("another identity's tasks/result is forwarded unjudged: only the server's binding of tasks refuses it", async () => {
    const alice = await connect(h.url, 'alice')
    let taskId = ''
    for await (const message of alice.experimental.tasks.callToolStream({ name: 'report', arguments: {} }, CallToolResultSchema, {
      task: { ttl: 60_000 },
    })) {
      if (message.type === 'taskCreated') taskId = message.task.taskId
    }
    await alice.close()
    const bob = await connect(h.url, 'bob')
    const before = (await h.audit()).length
    // The SDK's InMemoryTaskStore binds a task to the MCP session that created it; bob has his own.
    await expect(bob.experimental.tasks.getTaskResult(taskId, CallToolResultSchema)).rejects.toThrow(/not found/i)
    await bob.close()
    const entries = (await h.audit()).slice(before).filter((e) => e.method === 'tasks/result')
    expect(entries).toEqual([expect.objectContaining({ identity: 'bob', tool: '', decision: 'passthrough', status: 200 })])
  })

  test('a denied tool with params.task gets 403 and its task is never created', async () => {
    const client = await connect(h.url, 'alice')
    const before = (await h.audit()).length
    const toolCallsSeen = upstream.seen.filter((s) => s.method === 'tools/call').length
    const messages: Array<{ type: string; error?: unknown }> = []
    for await (const message of client.experimental.tasks.callToolStream({ name: 'secret_report', arguments: {} }, CallToolResultSchema, {
      task: { ttl: 60_000 },
    })) {
      messages.push(message)
    }
    await client.close()
    expect(messages).toHaveLength(1)
    expect(messages[0].type).toBe('error')
    expect(String(messages[0].error)).toContain('403')
    expect(upstream.started).not.toContain('secret_report')
    expect(upstream.seen.filter((s) => s.method === 'tools/call')).toHaveLength(toolCallsSeen)
    const entries = (await h.audit()).slice(before).filter((e) => e.method === 'tools/call')
    expect(entries).toEqual([
      expect.objectContaining({ identity: 'alice', tool: 'secret_report', decision: 'deny', status: 403, reason: 'default' }),
    ])
  })
})
