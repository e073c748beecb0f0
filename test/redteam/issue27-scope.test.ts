import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { serverKey } from '../../src/budget/keys'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { MCP_HEADERS, as, rpc, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { used } from '../servers/budget-suite'

const INIT = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }, 0)

/** Headers of a fresh session opened at `path` by `identity`. */
async function session(h: ServersHarness, path: string, identity: string): Promise<Record<string, string>> {
  const headers = { ...MCP_HEADERS, ...as(identity) }
  const init = await send(`${h.url}${path}`, 'POST', headers, JSON.stringify(INIT))
  expect(init.status).toBe(200)
  return { ...headers, 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-06-18' }
}

async function post(h: ServersHarness, path: string, headers: Record<string, string>, body: unknown) {
  const reply = await send(`${h.url}${path}`, 'POST', headers, JSON.stringify(body))
  const entries = (await h.audit()).filter((e) => e.request_id === reply.headers['x-wardline-request-id'])
  return { ...reply, entries }
}

/**
 * A caller trying to be judged or charged under another server than the one that runs the call: the
 * default route (/mcp) is the default server itself (same rules, same bucket), a batch is charged
 * whole to the server it goes to, and a legacy server's message POSTs are charged to that server.
 */
describe('red team: scope of rules and budgets', () => {
  let h: ServersHarness
  let store: MemoryBudgetStore
  beforeEach(async () => {
    store = new MemoryBudgetStore()
    h = await startServersHarness(
      { docs: {}, tickets: {}, legacy: { transport: 'sse' } },
      {
        default_server: 'docs',
        upstream_health_check: { enabled: false },
        features: { budget_enforcement: true },
        policy: { default: 'allow', rules: [{ identity: '*', tool: 'add', server: 'docs', effect: 'deny' }] },
        budget: {
          requests_per_window: 100,
          window_seconds: 60,
          servers: {
            docs: { requests_per_window: 2, window_seconds: 60 },
            tickets: { requests_per_window: 100, window_seconds: 60 },
            legacy: { requests_per_window: 1, window_seconds: 60 },
          },
        },
      },
      { budgetStore: store },
    )
  })
  afterEach(() => h.close())

  test('a rule `server: docs` judges docs reached at /mcp exactly as at /mcp/docs; tickets is not docs', async () => {
    const add = toolCall('add', { a: 1, b: 2 })
    const viaDefault = await post(h, '/mcp', await session(h, '/mcp', 'alice'), add)
    const viaName = await post(h, '/mcp/docs', await session(h, '/mcp/docs', 'alice'), add)
    const other = await post(h, '/mcp/tickets', await session(h, '/mcp/tickets', 'alice'), add)
    expect([viaDefault.status, viaName.status, other.status]).toEqual([403, 403, 200])
    expect(viaDefault.entries.map((e) => [e.server, e.decision])).toEqual([['docs', 'deny']])
    expect(viaName.entries.map((e) => [e.server, e.decision])).toEqual([['docs', 'deny']])
    expect(other.entries.map((e) => [e.server, e.decision])).toEqual([['tickets', 'allow']])
  })

  test('/mcp and /mcp/docs share one docs bucket; another server is not charged', async () => {
    const echo = toolCall('echo', { text: 'x' })
    expect((await post(h, '/mcp/docs', await session(h, '/mcp/docs', 'alice'), echo)).status).toBe(200)
    expect((await post(h, '/mcp', await session(h, '/mcp', 'bob'), echo)).status).toBe(200)
    const third = await post(h, '/mcp', await session(h, '/mcp', 'carol'), echo)
    expect(third.status).toBe(429)
    expect(third.entries).toHaveLength(1)
    expect(third.entries[0].server).toBe('docs')
    expect(await used(store, serverKey('docs'))).toBe(2)
    expect((await post(h, '/mcp/tickets', await session(h, '/mcp/tickets', 'carol'), echo)).status).toBe(200)
    expect(await used(store, serverKey('tickets'))).toBe(1)
  })

  test('a batch at /mcp is charged whole to docs: one past its bucket refuses all, charges nothing, reaches nothing', async () => {
    const headers = await session(h, '/mcp', 'alice')
    const before = h.upstreams.docs.seen.length
    const batch = [1, 2, 3].map((id) => toolCall('echo', { text: String(id) }, id))
    const refused = await post(h, '/mcp', headers, batch)
    expect(refused.status).toBe(429)
    expect(h.upstreams.docs.seen.length).toBe(before)
    expect(await used(store, serverKey('docs'))).toBe(0)
    expect(await used(store, serverKey('tickets'))).toBe(0)
    const fits = await post(h, '/mcp', headers, batch.slice(0, 2))
    expect(fits.status).toBe(200)
    expect(await used(store, serverKey('docs'))).toBe(2)
    expect(fits.entries.every((e) => e.server === 'docs')).toBe(true)
  })

  test("a legacy server's message POSTs (/mcp/legacy/messages) are judged and charged to it alone", async () => {
    const client = new Client({ name: 'legacy', version: '1' })
    await client.connect(new SSEClientTransport(new URL(`${h.url}/mcp/legacy`), { requestInit: { headers: as('alice') } }))
    try {
      await client.callTool({ name: 'echo', arguments: { text: 'one' } })
      // The legacy answer of a refusal is the message's error on the stream.
      await expect(client.callTool({ name: 'echo', arguments: { text: 'two' } })).rejects.toThrow(/429|budget|limit/i)
      expect(await used(store, serverKey('legacy'))).toBe(1)
      expect(await used(store, serverKey('docs'))).toBe(0)
      const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
      expect(calls.map((e) => [e.server, e.decision])).toEqual([
        ['legacy', 'allow'],
        ['legacy', 'throttled'],
      ])
    } finally {
      await client.close()
    }
  })
})
