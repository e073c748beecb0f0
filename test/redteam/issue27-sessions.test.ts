import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { MCP_HEADERS, as, rpc, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

const INIT = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }, 0)

/**
 * A session opened at one server and used at another: another upstream does not know it (its own
 * 404, the first server never sees the call); the same upstream under a second name keeps the
 * session's owner, so another caller cannot take it over through that name.
 */
describe('red team: sessions across servers', () => {
  let h: ServersHarness
  let shared: ExampleServer
  beforeAll(async () => {
    shared = await startExampleServer({ mode: 'stateful' })
    h = await startServersHarness(
      {
        docs: {},
        tickets: {},
        a: { url: `${shared.url}/mcp`, headers: { 'X-Api-Key': 'key-a' } },
        b: { url: `${shared.url}/mcp`, headers: { 'X-Api-Key': 'key-b' } },
      },
      { upstream_health_check: { enabled: false } },
    )
  })
  afterAll(async () => {
    await h.close()
    await shared.close()
  })

  async function open(path: string, identity: string): Promise<string> {
    const init = await send(`${h.url}${path}`, 'POST', { ...MCP_HEADERS, ...as(identity) }, JSON.stringify(INIT))
    expect(init.status).toBe(200)
    return String(init.headers['mcp-session-id'])
  }
  const call = (path: string, identity: string, session: string) =>
    send(
      `${h.url}${path}`,
      'POST',
      { ...MCP_HEADERS, ...as(identity), 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
      JSON.stringify(toolCall('echo', { text: 'x' })),
    )

  test('a docs session used at tickets never reaches docs, and tickets does not know it', async () => {
    const sid = await open('/mcp/docs', 'alice')
    const docsBefore = h.upstreams.docs.seen.length
    for (const who of ['alice', 'mallory']) {
      const reply = await call('/mcp/tickets', who, sid)
      expect(reply.status).toBe(404)
    }
    expect(h.upstreams.docs.seen.length).toBe(docsBefore)
  })

  test('the same upstream under two names: the owner keeps the session, another caller cannot take it through the other name', async () => {
    const sid = await open('/mcp/a', 'alice')
    const before = shared.seen.length
    const stranger = await call('/mcp/b', 'mallory', sid)
    expect(stranger.status).toBe(404)
    const entry = (await h.audit()).find((e) => e.request_id === stranger.headers['x-wardline-request-id'])
    expect(entry).toMatchObject({ server: 'b', decision: 'deny', reason_code: 'session.not_owner' })
    expect(shared.seen.length).toBe(before)
    // The owner through the other name: that name's rules and that name's header.
    const owner = await call('/mcp/b', 'alice', sid)
    expect(owner.status).toBe(200)
    expect(shared.seen.at(-1)?.headers['x-api-key']).toBe('key-b')
  })

  test('a session opened through one name and taken by its owner through another cannot then be taken by a stranger through the first', async () => {
    const sid = await open('/mcp/b', 'alice')
    expect((await call('/mcp/a', 'alice', sid)).status).toBe(200)
    const before = shared.seen.length
    expect((await call('/mcp/a', 'mallory', sid)).status).toBe(404)
    expect((await call('/mcp/b', 'mallory', sid)).status).toBe(404)
    expect(shared.seen.length).toBe(before)
  })

  test("a stranger can neither end (DELETE) nor listen to (GET) the owner's session through the other name", async () => {
    const sid = await open('/mcp/a', 'alice')
    const before = shared.seen.length
    const headers = { ...MCP_HEADERS, ...as('mallory'), 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' }
    expect((await send(`${h.url}/mcp/b`, 'DELETE', headers)).status).toBe(404)
    const controller = new AbortController()
    const listen = await fetch(`${h.url}/mcp/b`, { headers: { ...headers, accept: 'text/event-stream' }, signal: controller.signal })
    expect(listen.status).toBe(404)
    controller.abort()
    expect(shared.seen.length).toBe(before)
    expect((await call('/mcp/a', 'alice', sid)).status).toBe(200)
  })
})
