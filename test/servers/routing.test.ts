import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { serverTarget } from '../../src/server/router'
import { MCP_HEADERS, as, rpc } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

describe('serverTarget', () => {
  test.each([
    ['/mcp', { name: null, rest: '', query: '' }],
    ['/mcp?x=1', { name: null, rest: '', query: '?x=1' }],
    ['/mcp/docs', { name: 'docs', rest: '', query: '' }],
    ['/mcp/docs/messages?sessionId=1', { name: 'docs', rest: '/messages', query: '?sessionId=1' }],
    ['/mcpx', null],
    ['/', null],
    ['/other/mcp/docs', null],
  ])('%s', (url, expected) => expect(serverTarget(url)).toEqual(expected))
})

describe('several servers behind one gateway', () => {
  let h: ServersHarness
  beforeAll(async () => {
    h = await startServersHarness({ docs: { headers: { 'X-Api-Key': 'docs-secret' } }, tickets: {} }, { default_server: 'docs' })
  })
  afterAll(() => h.close())

  test('the SDK client reaches each server at /mcp/<name>, and the default at /mcp', async () => {
    for (const path of ['/mcp/docs', '/mcp/tickets', '/mcp']) {
      const client = new Client({ name: 't', version: '1' })
      await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}${path}`), { requestInit: { headers: as('alice') } }))
      const tools = await client.listTools()
      expect(tools.tools.length).toBeGreaterThan(0)
      await client.close()
    }
    const docsSeen = h.upstreams.docs.seen.filter((s) => s.method === 'POST')
    expect(docsSeen.length).toBeGreaterThan(0)
    expect(docsSeen.every((s) => s.url === '/mcp' && s.headers['x-api-key'] === 'docs-secret')).toBe(true)
    expect(h.upstreams.tickets.seen.every((s) => s.headers['x-api-key'] === undefined)).toBe(true)
    const entries = await h.audit()
    expect(new Set(entries.filter((e) => e.method === 'tools/list').map((e) => (e as { server?: string }).server))).toEqual(
      new Set(['docs', 'tickets']),
    )
  })

  test.each(['/mcp/nope', '/mcp/Docs', '/mcp/docs/../tickets', '/mcp/docs%2F..%2Ftickets', '/mcp/%2E%2E/tickets', '/mcp/docs/extra', '/x'])(
    '%s: 404, audited, reaches no server',
    async (path) => {
      const before = Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)
      const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(rpc('tools/list')), path)
      expect(reply.status).toBe(404)
      expect(JSON.parse(reply.body)).toMatchObject({ jsonrpc: '2.0', error: { code: 404 } })
      expect(Object.values(h.upstreams).reduce((n, u) => n + u.seen.length, 0)).toBe(before)
      const id = reply.headers['x-wardline-request-id']
      const entry = (await h.audit()).filter((e) => e.request_id === id)
      expect(entry).toHaveLength(1)
      expect(entry[0].reason_code).toBe('route.unknown_server')
    },
  )

  test("the health probe carries the server's own headers, and only to that server", () => {
    const probes = (name: string) =>
      h.upstreams[name].seen.filter((s) => s.method === 'GET' && s.headers['x-wardline-request-id'] === undefined)
    expect(probes('docs').length).toBeGreaterThan(0)
    expect(probes('docs').every((s) => s.headers['x-api-key'] === 'docs-secret')).toBe(true)
    expect(probes('tickets').length).toBeGreaterThan(0)
    expect(probes('tickets').every((s) => s.headers['x-api-key'] === undefined)).toBe(true)
  })

  test('a client-sent copy of a server header never reaches it', async () => {
    const reply = await send(
      `${h.url}/mcp/docs`,
      'POST',
      { ...MCP_HEADERS, ...as('alice'), 'x-api-key': 'forged', x_api_key: 'forged2' },
      JSON.stringify(rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } })),
    )
    expect(reply.status).toBe(200)
    const last = h.upstreams.docs.seen[h.upstreams.docs.seen.length - 1]
    expect(last.headers['x-api-key']).toBe('docs-secret')
    expect(last.headers['x_api_key']).toBeUndefined()
  })
})
