/**
 * Policy in a real gateway between clients and the official-SDK example server: what a denied caller
 * sees, what reaches the upstream, and the audit entry that names the rule.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import winston from 'winston'
import { startExampleServer } from '../../examples/mcp-server'
import type { AuditEntry } from '../../src/audit/entry'
import { startGateway } from '../../src/server/compose'
import { type Harness, MCP_HEADERS, as, configFrom, rpc, startHarness, tempDir, toolCall } from '../helpers/harness'

const POLICY = {
  default: 'deny',
  rules: [
    { identity: 'intern-*', tool: 'expensive_tool', effect: 'deny' }, // rule 0
    { identity: 'alice', tenant: 'globex', tool: '*', effect: 'deny' }, // rule 1
    { identity: '*', tool: '*', effect: 'allow' }, // rule 2
    { identity: '*', method: 'resources/*', tool: 'example://*', effect: 'allow' }, // rule 3
    { identity: '*', method: 'resources/list', tool: '*', effect: 'allow' }, // rule 4
    { identity: 'bob', method: 'prompts/get', tool: 'greeting', effect: 'allow' }, // rule 5
  ],
}

interface Reply {
  status: number
  headers: Headers
  json: unknown
}

async function post(h: Harness, body: unknown, identity = 'alice', tenant = 'acme'): Promise<Reply> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...as(identity, tenant), ...MCP_HEADERS },
    body: JSON.stringify(body),
  })
  return { status: res.status, headers: res.headers, json: await res.json() }
}

/** Runs `act`; returns the audit entries it added and how many requests reached the upstream meanwhile. */
async function observe(h: Harness, act: () => Promise<void>): Promise<{ entries: AuditEntry[]; upstreamRequests: number }> {
  const before = (await h.audit()).length
  const seenBefore = h.upstream.seen.length
  await act()
  return { entries: (await h.audit()).slice(before), upstreamRequests: h.upstream.seen.length - seenBefore }
}

const FORBIDDEN = (id: number | string | null): unknown => ({ jsonrpc: '2.0', id, error: { code: 403, message: 'Forbidden by policy' } })

describe('policy at the gateway', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { policy: POLICY } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a denied call gets 403 with its id echoed, never reaches the upstream, and its audit entry names the rule', async () => {
    let reply!: Reply
    const { entries, upstreamRequests } = await observe(h, async () => {
      reply = await post(h, toolCall('expensive_tool', {}, 'call-7'), 'intern-sam')
    })
    expect(reply.status).toBe(403)
    expect(reply.headers.get('content-type')).toBe('application/json')
    expect(reply.headers.get('mcp-session-id')).toBeNull()
    expect(reply.json).toEqual(FORBIDDEN('call-7'))
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({
        identity: 'intern-sam',
        tenant: 'acme',
        method: 'tools/call',
        tool: 'expensive_tool',
        decision: 'deny',
        status: 403,
        reason: 'rule 0',
      }),
    ])
  })

  test('with upstream: alone, the audit lines carry no server: the keys and their order are as they always were', async () => {
    await post(h, toolCall('echo', { text: 'hi' }, 4), 'intern-sam')
    await post(h, toolCall('expensive_tool', {}, 5), 'intern-sam')
    await h.gateway.audit.flush()
    const KEYS = [
      'timestamp',
      'request_id',
      'identity',
      'tenant',
      'method',
      'tool',
      'decision',
      'status',
      'latency_ms',
      'reason_code',
      'reason',
      'session_id',
    ]
    const lines = readFileSync(h.auditFile, 'utf8').trimEnd().split('\n')
    expect(lines.length).toBeGreaterThan(1)
    for (const line of lines) {
      expect(line).not.toContain('"server"')
      const keys = Object.keys(JSON.parse(line) as object)
      expect(keys).toEqual(KEYS.filter((k) => keys.includes(k)))
    }
  })

  test('an allowed call is forwarded and audited as allow with no reason', async () => {
    let reply!: Reply
    const { entries, upstreamRequests } = await observe(h, async () => {
      reply = await post(h, toolCall('echo', { text: 'hi' }, 3), 'intern-sam')
    })
    expect(reply.status).toBe(200)
    expect(reply.json).toMatchObject({ id: 3, result: { content: [{ type: 'text', text: 'hi' }] } })
    expect(upstreamRequests).toBe(1)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({ tool: 'echo', decision: 'allow', status: 200 })
    expect(entries[0].reason).toBeUndefined()
  })

  test('the same identity is denied in one tenant and allowed in another', async () => {
    expect((await post(h, toolCall('echo', { text: 'a' }), 'alice', 'globex')).status).toBe(403)
    expect((await post(h, toolCall('echo', { text: 'a' }), 'alice', 'acme')).status).toBe(200)
    const last = (await h.audit()).slice(-2)
    expect(last.map((e) => [e.tenant, e.decision, e.reason])).toEqual([
      ['globex', 'deny', 'rule 1'],
      ['acme', 'allow', undefined],
    ])
  })

  test('resources and prompts are gated by their own rules; the default denies what no rule allows', async () => {
    const { entries, upstreamRequests } = await observe(h, async () => {
      expect((await post(h, rpc('resources/read', { uri: 'example://readme' }, 1))).status).toBe(200)
      expect((await post(h, rpc('resources/read', { uri: 'file:///etc/passwd' }, 2))).json).toEqual(FORBIDDEN(2))
      expect((await post(h, rpc('resources/list', {}, 3))).status).toBe(200)
      expect((await post(h, rpc('prompts/get', { name: 'greeting', arguments: { name: 'x' } }, 4), 'bob')).status).toBe(200)
      expect((await post(h, rpc('prompts/get', { name: 'greeting', arguments: { name: 'x' } }, 5), 'carol')).json).toEqual(FORBIDDEN(5))
    })
    expect(upstreamRequests).toBe(3)
    expect(entries.map((e) => [e.method, e.tool, e.decision, e.reason])).toEqual([
      ['resources/read', 'example://readme', 'allow', undefined],
      ['resources/read', 'file:///etc/passwd', 'deny', 'default'],
      ['resources/list', '', 'allow', undefined],
      ['prompts/get', 'greeting', 'allow', undefined],
      ['prompts/get', 'greeting', 'deny', 'default'],
    ])
  })

  // A resource's `name` is a label the caller controls; the server reads the `uri`, so policy must judge that.
  test('a resources/read is judged by the uri the server reads, whatever params.name claims', async () => {
    const { entries, upstreamRequests } = await observe(h, async () => {
      const reply = await post(h, rpc('resources/read', { uri: 'file:///etc/passwd', name: 'example://readme' }, 11))
      expect(reply.json).toEqual(FORBIDDEN(11))
    })
    expect(upstreamRequests).toBe(0)
    expect(entries).toEqual([
      expect.objectContaining({ method: 'resources/read', tool: 'file:///etc/passwd', decision: 'deny', reason: 'default' }),
    ])
  })

  test('methods that policy does not gate pass through even under a default deny', async () => {
    const reply = await post(h, rpc('tools/list', {}, 9), 'nobody')
    expect(reply.status).toBe(200)
    expect((await h.audit()).slice(-1)[0]).toMatchObject({ method: 'tools/list', decision: 'passthrough', status: 200 })
  })

  test('a batch with one denied element is refused whole, with one audit entry naming the denied element', async () => {
    let reply!: Reply
    const { entries, upstreamRequests } = await observe(h, async () => {
      reply = await post(h, [toolCall('echo', { text: 'a' }, 1), toolCall('expensive_tool', {}, 2), rpc('tools/list', {}, 3)], 'intern-kim')
    })
    expect(reply.status).toBe(403)
    expect(reply.json).toEqual(FORBIDDEN(null))
    expect(upstreamRequests).toBe(0)
    // One entry for a refused request, however long its batch (refused batches once flooded the audit queue).
    expect(entries.map((e) => [e.request_id.includes('/'), e.method, e.tool, e.decision, e.status, e.reason])).toEqual([
      [false, 'tools/call,tools/list', 'expensive_tool', 'deny', 403, 'batch refused: element 1 denied by rule 0'],
    ])
  })
})

describe('policy after the budget', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      mode: 'stateless-json',
      config: {
        features: { budget_enforcement: true },
        budget: { requests_per_window: 2, window_seconds: 3600 },
        policy: { default: 'allow', rules: [{ identity: '*', tool: 'expensive_tool', effect: 'deny' }] },
      },
    })
  })
  afterAll(async () => {
    await h.close()
  })

  test("a call that policy denies still counts against the caller's budget (budget runs first)", async () => {
    expect((await post(h, toolCall('expensive_tool', {}, 1), 'dave')).status).toBe(403)
    expect((await post(h, toolCall('expensive_tool', {}, 2), 'dave')).status).toBe(403)
    const third = await post(h, toolCall('echo', { text: 'x' }, 3), 'dave')
    expect(third.status).toBe(429)
    expect((await post(h, toolCall('echo', { text: 'x' }, 4), 'erin')).status).toBe(200)
    const entries = (await h.audit()).filter((e) => e.identity === 'dave')
    expect(entries.map((e) => [e.tool, e.decision, e.status])).toEqual([
      ['expensive_tool', 'deny', 403],
      ['expensive_tool', 'deny', 403],
      ['echo', 'throttled', 429],
    ])
  })
})

describe('the official SDK client and a denied call', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      mode: 'stateful',
      config: {
        policy: {
          default: 'allow',
          rules: [
            { identity: 'alice', tool: 'expensive_tool', effect: 'deny' },
            { identity: 'alice', method: 'prompts/get', tool: '*', effect: 'deny' },
          ],
        },
      },
    })
  })
  let cleanup: () => Promise<void> = () => Promise.resolve()
  afterAll(async () => {
    await cleanup()
    await h.close()
  })

  test('sees the 403 as an error and keeps working on the same session', async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice', 'acme') } })
    const client = new Client({ name: 'policy-test', version: '1.0.0' })
    await client.connect(transport)
    // Closed even when an assertion fails, so its open GET stream does not hold shutdown for the grace period.
    cleanup = () => client.close()
    const session = transport.sessionId
    expect(session).toBeTruthy()

    await expect(client.callTool({ name: 'expensive_tool', arguments: {} })).rejects.toThrow(/403[\s\S]*Forbidden by policy/)
    await expect(client.getPrompt({ name: 'greeting', arguments: { name: 'x' } })).rejects.toThrow(/403/)
    const echoed = (await client.callTool({ name: 'echo', arguments: { text: 'still here' } })) as { content: Array<{ text: string }> }
    expect(echoed.content[0].text).toBe('still here')
    expect(transport.sessionId).toBe(session)
    // prompts/list itself is allowed, but alice may get no prompt, so the list hides greeting.
    expect((await client.listPrompts()).prompts.map((p) => p.name)).toEqual([])
    await client.close()

    const gated = (await h.audit()).filter((e) => e.method === 'tools/call' || e.method.startsWith('prompts/'))
    expect(gated.map((e) => [e.method, e.tool, e.decision, e.reason])).toEqual([
      ['tools/call', 'expensive_tool', 'deny', 'rule 0'],
      ['prompts/get', 'greeting', 'deny', 'rule 1'],
      ['tools/call', 'echo', 'allow', undefined],
      ['prompts/list', '', 'allow', 'list filtered by policy: 1 of 1 prompts hidden'],
    ])
  })
})

describe('without a policy', () => {
  test('every gated call is allowed, and startup says that nothing is gated', async () => {
    const lines: string[] = []
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString())
        done()
      },
    })
    const log = winston.createLogger({
      level: 'info',
      format: winston.format.json(),
      transports: [new winston.transports.Stream({ stream: sink })],
    })
    const upstream = await startExampleServer({ mode: 'stateless-json' })
    const dir = tempDir()
    const gateway = await startGateway(
      configFrom(
        { listen: '127.0.0.1:0', upstream: upstream.url, auth: { mode: 'header' }, audit: { output: join(dir, 'audit.jsonl') } },
        {},
        dir,
      ),
      { log },
    )
    try {
      expect(lines.map((line) => JSON.parse(line) as { level: string; message: string })).toContainEqual(
        expect.objectContaining({
          level: 'warn',
          message: 'no policy configured (policy or policy_file): every tool, resource and prompt call is allowed',
        }),
      )
      const res = await fetch(`${gateway.url}/mcp`, {
        method: 'POST',
        headers: { ...as('anyone'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('expensive_tool')),
      })
      expect(res.status).toBe(200)
    } finally {
      await gateway.shutdown()
      await upstream.close()
    }
  })
})
