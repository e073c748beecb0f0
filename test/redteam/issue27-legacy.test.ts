import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { configWarnings } from '../../src/config/warnings'
import { routedEndpoint } from '../../src/server/legacy-endpoint'
import { MCP_HEADERS, as, rpc } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

/**
 * Paths below a legacy (`sse`) server's name go to that server's origin with its headers: only the
 * message endpoint's POSTs belong there. Another method at such a path would carry the server's
 * credentials to whatever else its origin serves.
 */
describe('red team: paths below a legacy server', () => {
  let h: ServersHarness
  const ALICE = as('alice')
  beforeAll(async () => {
    h = await startServersHarness(
      { tickets: { transport: 'sse', headers: { 'X-Api-Key': 'tickets-secret' } }, docs: {} },
      { upstream_health_check: { enabled: false } },
    )
  })
  afterAll(() => h.close())

  test.each([
    ['GET', '/mcp/tickets/sse'],
    ['GET', '/mcp/tickets/messages?sessionId=x'],
    ['DELETE', '/mcp/tickets/mcp'],
    ['PUT', '/mcp/tickets/messages?sessionId=x'],
    ['PATCH', '/mcp/tickets/messages?sessionId=x'],
  ])('%s %s: 404 from the gateway, audited once, nothing reaches the server', async (method, path) => {
    const before = h.upstreams.tickets.seen.length
    const reply = await send(h.url, method, { ...MCP_HEADERS, ...ALICE }, method === 'GET' ? undefined : '{}', path)
    expect(reply.status).toBe(404)
    expect(reply.body).not.toContain('tickets-secret')
    expect(h.upstreams.tickets.seen.length).toBe(before)
    const id = reply.headers['x-wardline-request-id']
    const entries = (await h.audit()).filter((e) => e.request_id === id)
    expect(entries).toHaveLength(1)
    expect(entries[0].reason_code).toBe('route.unknown_server')
  })

  // Without message_path a POST at any plain path below the name is sent to that path of the
  // server's origin, with its headers (here the origin's other MCP endpoint, /mcp); check-config and
  // startup warn about it. With message_path only that path is reached.
  test("without message_path: the origin's other endpoint answers, with the credential sent (and the config warns)", async () => {
    const init = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } })
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, JSON.stringify(init), '/mcp/tickets/mcp')
    const last = h.upstreams.tickets.seen.at(-1)
    expect(reply.status).toBe(200)
    expect(last).toMatchObject({ method: 'POST', url: '/mcp' })
    expect(last?.headers['x-api-key']).toBe('tickets-secret')
    expect(configWarnings(h.config)).toContainEqual(expect.stringContaining('servers.tickets (transport: sse) has no message_path'))
  })
})

describe('red team: a legacy server with message_path', () => {
  let h: ServersHarness
  const ALICE = as('alice')
  beforeAll(async () => {
    h = await startServersHarness(
      { tickets: { transport: 'sse', message_path: '/messages', headers: { 'X-Api-Key': 'tickets-secret' } } },
      { upstream_health_check: { enabled: false } },
    )
  })
  afterAll(() => h.close())

  test('POST /mcp/tickets/mcp (not its message_path) is 404, audited once, and reaches nothing', async () => {
    const before = h.upstreams.tickets.seen.length
    const init = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } })
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...ALICE }, JSON.stringify(init), '/mcp/tickets/mcp')
    expect(reply.status).toBe(404)
    expect(h.upstreams.tickets.seen.length).toBe(before)
    const entries = (await h.audit()).filter((e) => e.request_id === reply.headers['x-wardline-request-id'])
    expect(entries.map((e) => e.reason_code)).toEqual(['route.unknown_server'])
    expect(configWarnings(h.config).filter((w) => w.includes('message_path'))).toEqual([])
  })

  test('the SDK legacy client still works: its endpoint is the message_path', async () => {
    const client = new Client({ name: 't', version: '1' })
    await client.connect(new SSEClientTransport(new URL(`${h.url}/mcp/tickets`), { requestInit: { headers: ALICE } }))
    expect((await client.listTools()).tools.length).toBeGreaterThan(0)
    await client.close()
    expect(h.upstreams.tickets.seen.filter((s) => s.method === 'POST').every((s) => s.url.startsWith('/messages?'))).toBe(true)
  })

  test('a stream whose endpoint names another path is ended: a routedEndpoint check', () => {
    expect(() => routedEndpoint('/other?sessionId=1', new URL('http://127.0.0.1:1/sse'), '/mcp/tickets', '/messages')).toThrow(
      /not the server's message_path/,
    )
    expect(routedEndpoint('/messages?sessionId=1', new URL('http://127.0.0.1:1/sse'), '/mcp/tickets', '/messages')).toBe(
      '/mcp/tickets/messages?sessionId=1',
    )
  })
})
