/**
 * Budgets behind a gateway with several servers, end to end (header auth, two example MCP servers),
 * run against each store: the memory store (test/servers/budget.test.ts) and Postgres
 * (test/postgres/servers-budget.test.ts). Counts are read back from the store itself.
 */
import { serverKey, identityKey, tenantKey, toolKey, windowKey } from '../../src/budget/keys'
import type { BudgetStore } from '../../src/budget/store'
import { MCP_HEADERS, as, rpc, toolCall } from '../helpers/harness'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly json: { error?: { data?: { bucket?: string } } } | null
}

/** Each harness's MCP sessions (the example servers are stateful), by server and identity. */
const sessions = new WeakMap<ServersHarness, Map<string, string>>()

async function sessionOf(h: ServersHarness, server: string, identity: string): Promise<string> {
  let known = sessions.get(h)
  if (known === undefined) sessions.set(h, (known = new Map<string, string>()))
  const held = known.get(`${server} ${identity}`)
  if (held !== undefined) return held
  const init = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } })
  const res = await fetch(`${h.url}/mcp/${server}`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(init),
  })
  await res.text()
  const id = res.headers.get('mcp-session-id')
  if (res.status !== 200 || id === null) throw new Error(`initialize on ${server} answered ${res.status}`)
  known.set(`${server} ${identity}`, id)
  return id
}

export async function callOn(
  h: ServersHarness,
  server: string,
  identity: string,
  tool = 'echo',
  args: Record<string, unknown> = { text: 'hi' },
): Promise<Reply> {
  const session = await sessionOf(h, server, identity)
  const res = await fetch(`${h.url}/mcp/${server}`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity), 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify(toolCall(tool, args)),
  })
  const text = await res.text()
  // A stateful server answers in SSE: the message is the data line.
  const data = text.startsWith('event:') ? (/^data: (.*)$/m.exec(text)?.[1] ?? '') : text
  return { status: res.status, headers: res.headers, json: data === '' ? null : (JSON.parse(data) as Reply['json']) }
}

/** Units used in a bucket's 60 s window (0 with none open). */
export async function used(store: BudgetStore, bucketKey: string): Promise<number> {
  const [reading] = await (store.inspect as NonNullable<BudgetStore['inspect']>)({ keys: [windowKey(bucketKey, 60)] })
  return reading.used
}

const W = { window_seconds: 60 }

export function serverBudgetSuite(label: string, makeStore: () => Promise<BudgetStore>): void {
  describe(`budgets with several servers (${label})`, () => {
    let h: ServersHarness | null = null
    let store: BudgetStore
    afterEach(async () => {
      await h?.close()
      h = null
    })

    const start = async (budget: Record<string, unknown>): Promise<ServersHarness> => {
      store = await makeStore()
      h = await startServersHarness(
        { docs: {}, tickets: {} },
        { features: { budget_enforcement: true }, budget: { requests_per_window: 100, ...W, ...budget } },
        { budgetStore: store },
      )
      return h
    }

    test('a server bucket is shared by every caller of that server: a third call is refused, whoever makes it', async () => {
      const g = await start({ servers: { docs: { requests_per_window: 2, ...W } } })
      expect((await callOn(g, 'docs', 'alice')).status).toBe(200)
      const second = await callOn(g, 'docs', 'bob')
      expect(second.status).toBe(200)
      expect(second.headers.get('ratelimit-policy')).toBe('"server";q=2;w=60, "identity";q=100;w=60')
      const third = await callOn(g, 'docs', 'alice')
      expect(third.status).toBe(429)
      expect(third.json?.error?.data?.bucket).toBe('server')
      expect(third.headers.get('ratelimit')).toMatch(/^"server";r=0;t=\d+, "identity";r=99;t=\d+$/)
      // Another server's callers are not charged to it.
      expect((await callOn(g, 'tickets', 'carol')).status).toBe(200)
      const throttled = (await g.audit()).filter((e) => e.decision === 'throttled')
      expect(throttled).toHaveLength(1)
      expect(throttled[0]).toMatchObject({
        identity: 'alice',
        tool: 'echo',
        reason: 'rate limit exceeded: server bucket of "docs", 2 requests per 60s window',
      })
      expect(await used(store, serverKey('docs'))).toBe(2)
      expect(await used(store, serverKey('tickets'))).toBe(0)
    })

    test('a call the server bucket refuses consumes nothing in the tool, tenant or identity buckets', async () => {
      const g = await start({
        tenants: { acme: { requests_per_window: 10, ...W } },
        tools: { 'docs/echo': { requests_per_window: 10, ...W } },
        servers: { docs: { requests_per_window: 1, ...W } },
      })
      const first = await callOn(g, 'docs', 'alice')
      expect(first.status).toBe(200)
      expect(first.headers.get('ratelimit-policy')).toBe('"tool";q=10;w=60, "server";q=1;w=60, "tenant";q=10;w=60, "identity";q=100;w=60')
      for (let i = 0; i < 3; i++) expect((await callOn(g, 'docs', 'bob')).status).toBe(429)
      expect(await used(store, toolKey('echo', 'docs'))).toBe(1)
      expect(await used(store, serverKey('docs'))).toBe(1)
      expect(await used(store, tenantKey('acme'))).toBe(1)
      expect(await used(store, identityKey('acme', 'alice'))).toBe(1)
      expect(await used(store, identityKey('acme', 'bob'))).toBe(0)
    })

    test('a call the identity bucket refuses consumes nothing in the server bucket; identity buckets span servers', async () => {
      const g = await start({ requests_per_window: 2, servers: { docs: { requests_per_window: 10, ...W } } })
      expect((await callOn(g, 'docs', 'alice')).status).toBe(200)
      expect((await callOn(g, 'tickets', 'alice')).status).toBe(200)
      const refused = await callOn(g, 'docs', 'alice')
      expect(refused.status).toBe(429)
      expect(refused.json?.error?.data?.bucket).toBe('identity')
      expect(await used(store, serverKey('docs'))).toBe(1)
      expect(await used(store, identityKey('acme', 'alice'))).toBe(2)
    })

    test('a <server>/<tool> bucket applies on that server only: the same tool on another server is not charged', async () => {
      const g = await start({ tools: { 'docs/echo': { requests_per_window: 1, ...W } } })
      expect((await callOn(g, 'docs', 'alice')).status).toBe(200)
      const elsewhere = await callOn(g, 'tickets', 'bob')
      expect(elsewhere.status).toBe(200)
      expect(elsewhere.headers.get('ratelimit-policy')).toBe('"identity";q=100;w=60')
      expect(await used(store, toolKey('echo', 'tickets'))).toBe(0)
      expect(await used(store, toolKey('echo'))).toBe(0)
      expect(await used(store, toolKey('echo', 'docs'))).toBe(1)
      const refused = await callOn(g, 'docs', 'carol')
      expect(refused.status).toBe(429)
      expect(refused.json?.error?.data?.bucket).toBe('tool')
    })

    test('the loop breaker counts the same call on two servers as two calls', async () => {
      const g = await start({ repeat_limit: { calls: 1, window_seconds: 60 } })
      expect((await callOn(g, 'docs', 'alice')).status).toBe(200)
      expect((await callOn(g, 'tickets', 'alice')).status).toBe(200)
      const again = await callOn(g, 'docs', 'alice')
      expect(again.status).toBe(429)
      expect(again.json?.error?.data?.bucket).toBe('repeat')
    })
  })
}
