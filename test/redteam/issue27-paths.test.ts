import { MCP_HEADERS, as, rpc } from '../helpers/harness'
import { rawStatus, send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

/**
 * A caller trying to reach a server by a spelling the map does not hold, or a path below a server:
 * every such request is answered 404 by the gateway, audited exactly once, and nothing reaches any
 * upstream.
 */
describe('red team: paths that name no server', () => {
  let h: ServersHarness
  const seen = (): number => Object.values(h.upstreams).reduce((n, u) => n + u.seen.filter((s) => s.method !== 'GET').length, 0)
  beforeAll(async () => {
    h = await startServersHarness(
      { docs: { headers: { 'X-Api-Key': 'docs-secret' } }, tickets: { transport: 'sse' } },
      { default_server: 'docs', upstream_health_check: { enabled: false } },
    )
  })
  afterAll(() => h.close())

  const body = JSON.stringify(rpc('tools/list'))
  test.each([
    '/mcp/DOCS',
    '/mcp/Docs',
    '/mcp/docs/',
    '/mcp//docs',
    '//mcp/docs',
    '/mcp/./docs',
    '/mcp/docs/.',
    '/mcp/docs;x',
    '/mcp/docs%00',
    '/mcp/docs.',
    '/mcp/%64ocs',
    '/mcp%2Fdocs',
    '/mcp%2fdocs',
    '/mcp/docs%2F',
    '/mcp/docs%20',
    '/mcp/%EF%BD%84ocs', // fullwidth d
    '/mcp/d%D0%BEcs', // Cyrillic o
    '/mcp/docs/mcp',
    '/mcp/docs/../docs',
    '/mcp/tickets/../docs',
    '/mcp/tickets/%2E%2E/mcp',
    '/mcp/tickets//messages',
    '/mcp/tickets/./messages',
    '/mcp/tickets/',
    '/MCP/docs',
    '/mcp/',
    '/sse',
    '/messages?sessionId=x',
    // Long paths, under Node's 16 KiB header limit (above it Node answers 431 before any stage).
    `/mcp/${'d'.repeat(8000)}`,
    `/mcp/docs/${'a/'.repeat(3000)}`,
  ])('POST %#: 404, audited once, reaches no server', async (path) => {
    const before = seen()
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, body, path)
    expect(reply.status).toBe(404)
    expect(JSON.parse(reply.body)).toMatchObject({ jsonrpc: '2.0', error: { code: 404 } })
    expect(reply.body).not.toContain('docs-secret')
    expect(seen()).toBe(before)
    const id = reply.headers['x-wardline-request-id']
    const entries = (await h.audit()).filter((e) => e.request_id === id)
    expect(entries).toHaveLength(1)
    expect(entries[0].reason_code).toBe('route.unknown_server')
    expect(JSON.stringify(entries[0]).length).toBeLessThan(4000)
  })

  test.each(['GET', 'DELETE', 'PUT', 'OPTIONS'])('%s /mcp/nope reaches no server', async (method) => {
    const before = Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)
    const reply = await send(h.url, method, { ...MCP_HEADERS, ...as('alice') }, undefined, '/mcp/nope')
    expect([404, 405]).toContain(reply.status)
    expect(Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)).toBe(before)
  })

  test('an absolute-form request target naming a server reaches none (404, audited once)', async () => {
    const port = new URL(h.url).port
    const count = async (): Promise<number> => (await h.audit()).filter((e) => e.reason_code === 'route.unknown_server').length
    const before = seen()
    const audited = await count()
    const text =
      `POST http://127.0.0.1:${port}/mcp/docs HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Wardline-Identity: alice\r\nX-Wardline-Tenant: acme\r\n` +
      `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`
    expect(await rawStatus(Number(port), text)).toBe(404)
    expect(seen()).toBe(before)
    expect(await count()).toBe(audited + 1)
  })

  test('an asterisk-form target (OPTIONS *) reaches no server', async () => {
    const port = Number(new URL(h.url).port)
    const before = Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)
    const status = await rawStatus(
      port,
      `OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Wardline-Identity: alice\r\nX-Wardline-Tenant: acme\r\nConnection: close\r\n\r\n`,
    )
    expect([400, 404, 405]).toContain(status)
    expect(Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)).toBe(before)
  })

  test('a Host naming a server changes nothing: the path alone routes', async () => {
    const before = seen()
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice'), host: 'docs' }, body, '/mcp/nope')
    expect([400, 403, 404, 421]).toContain(reply.status)
    expect(seen()).toBe(before)
  })

  test('the stranger learns nothing: an unknown server without a token is refused by auth, not 404', async () => {
    const before = seen()
    const reply = await send(h.url, 'POST', MCP_HEADERS, body, '/mcp/nope')
    expect(reply.status).toBe(401)
    expect(seen()).toBe(before)
    const entries = (await h.audit()).filter((e) => e.request_id === reply.headers['x-wardline-request-id'])
    expect(entries).toHaveLength(1)
  })

  test.each([
    ['not JSON', '{'],
    ['over max_body_bytes', JSON.stringify({ ...rpc('tools/list'), pad: 'x'.repeat(11 * 1024 * 1024) })],
  ])('an unknown server with a body %s: refused once, reaches no server', async (_label, text) => {
    const before = seen()
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, text, '/mcp/nope')
    expect([404, 413]).toContain(reply.status)
    expect(seen()).toBe(before)
    const entries = (await h.audit()).filter((e) => e.request_id === reply.headers['x-wardline-request-id'])
    expect(entries).toHaveLength(1)
  })
})
