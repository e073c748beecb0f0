import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { MCP_HEADERS, as, rpc, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

/** The tool names an SDK client lists through the gateway at `path`. */
async function listed(h: ServersHarness, path: string, identity: string): Promise<string[]> {
  const client = new Client({ name: 't', version: '1' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}${path}`), { requestInit: { headers: as(identity) } }))
  try {
    return (await client.listTools()).tools.map((t) => t.name).sort()
  } finally {
    await client.close()
  }
}

/** Headers of a session opened at `path` (the example servers are stateful). */
async function session(h: ServersHarness, path: string, identity: string): Promise<Record<string, string>> {
  const headers = { ...MCP_HEADERS, ...as(identity) }
  const init = await send(
    `${h.url}${path}`,
    'POST',
    headers,
    JSON.stringify(rpc('initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'c', version: '1' } }, 0)),
  )
  expect(init.status).toBe(200)
  return { ...headers, 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-03-26' }
}

/** Status of one tools/call sent at `path` in a session of its own, and its audit entry. */
async function call(h: ServersHarness, path: string, identity: string, tool: string, args: Record<string, unknown> = {}) {
  const reply = await send(`${h.url}${path}`, 'POST', await session(h, path, identity), JSON.stringify(toolCall(tool, args)))
  const id = reply.headers['x-wardline-request-id']
  const entries = (await h.audit()).filter((e) => e.request_id === id)
  expect(entries).toHaveLength(1)
  return { status: reply.status, entry: entries[0] }
}

describe('policy rules scoped by server', () => {
  let h: ServersHarness
  beforeAll(async () => {
    h = await startServersHarness(
      { docs: {}, tickets: {}, dev: {} },
      {
        default_server: 'docs',
        policy: {
          default: 'allow',
          rules: [
            // Only on docs: the same tool on tickets and dev stays allowed.
            { identity: 'alice', tool: 'echo', server: 'docs', effect: 'deny' },
            // A glob: docs and dev, never tickets.
            { identity: 'alice', tool: 'add', server: 'd*', effect: 'deny' },
            // No server key: every server.
            { identity: 'alice', tool: 'expensive_tool', effect: 'deny' },
          ],
        },
      },
    )
  })
  afterAll(() => h.close())

  test('a deny rule for one server does not deny the same tool on another', async () => {
    const docs = await call(h, '/mcp/docs', 'alice', 'echo', { text: 'hi' })
    expect(docs.status).toBe(403)
    expect(docs.entry).toMatchObject({ decision: 'deny', reason_code: 'policy.denied', reason: 'rule 0', server: 'docs' })
    // The default server at /mcp is docs, judged by docs' rules.
    expect((await call(h, '/mcp', 'alice', 'echo', { text: 'hi' })).status).toBe(403)
    for (const server of ['tickets', 'dev']) {
      const other = await call(h, `/mcp/${server}`, 'alice', 'echo', { text: 'hi' })
      expect(other.status).toBe(200)
      expect(other.entry).toMatchObject({ decision: 'allow', server })
    }
    // Another caller on docs is untouched.
    expect((await call(h, '/mcp/docs', 'bob', 'echo', { text: 'hi' })).status).toBe(200)
  })

  test('server: "d*" covers docs and dev; an omitted server covers every server', async () => {
    expect((await call(h, '/mcp/docs', 'alice', 'add', { a: 1, b: 2 })).entry).toMatchObject({ reason: 'rule 1', server: 'docs' })
    expect((await call(h, '/mcp/dev', 'alice', 'add', { a: 1, b: 2 })).entry).toMatchObject({ reason: 'rule 1', server: 'dev' })
    expect((await call(h, '/mcp/tickets', 'alice', 'add', { a: 1, b: 2 })).status).toBe(200)
    for (const server of ['docs', 'tickets', 'dev']) {
      const r = await call(h, `/mcp/${server}`, 'alice', 'expensive_tool')
      expect(r.status).toBe(403)
      expect(r.entry).toMatchObject({ reason: 'rule 2', server })
    }
  })

  test('tools/list from each server is filtered by the rules for that server', async () => {
    const all = await listed(h, '/mcp/docs', 'bob')
    expect(all).toEqual(expect.arrayContaining(['add', 'echo', 'expensive_tool']))
    const without = (...hidden: string[]): string[] => all.filter((t) => !hidden.includes(t))
    expect(await listed(h, '/mcp/docs', 'alice')).toEqual(without('echo', 'add', 'expensive_tool'))
    expect(await listed(h, '/mcp', 'alice')).toEqual(without('echo', 'add', 'expensive_tool'))
    expect(await listed(h, '/mcp/dev', 'alice')).toEqual(without('add', 'expensive_tool'))
    expect(await listed(h, '/mcp/tickets', 'alice')).toEqual(without('expensive_tool'))
    const lists = (await h.audit()).filter((e) => e.method === 'tools/list' && e.identity === 'alice')
    expect(lists.find((e) => e.server === 'tickets')?.reason).toMatch(/1 of \d+ tools hidden/)
    expect(lists.find((e) => e.server === 'dev')?.reason).toMatch(/2 of \d+ tools hidden/)
  })

  test('each element of a forwarded batch, and a refused batch, carries the server', async () => {
    const batch = [toolCall('echo', { text: 'a' }, 1), toolCall('add', { a: 1, b: 2 }, 2), rpc('ping', undefined, 3)]
    const ok = await send(`${h.url}/mcp/tickets`, 'POST', await session(h, '/mcp/tickets', 'bob'), JSON.stringify(batch))
    expect(ok.status).toBe(200)
    const id = String(ok.headers['x-wardline-request-id'])
    const entries = (await h.audit()).filter((e) => e.request_id.startsWith(`${id}/`))
    expect(entries.map((e) => [e.request_id.slice(id.length), e.server])).toEqual([
      ['/0', 'tickets'],
      ['/1', 'tickets'],
      ['/rest', 'tickets'],
    ])
    const refused = await send(`${h.url}/mcp/dev`, 'POST', await session(h, '/mcp/dev', 'alice'), JSON.stringify(batch))
    expect(refused.status).toBe(403)
    const rid = refused.headers['x-wardline-request-id']
    expect((await h.audit()).filter((e) => e.request_id === rid)).toEqual([
      expect.objectContaining({ decision: 'deny', tool: 'add', server: 'dev' }),
    ])
  })

  test('a path that names no server is audited without a server', async () => {
    const reply = await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(toolCall('echo')), '/mcp/nope')
    expect(reply.status).toBe(404)
    const id = reply.headers['x-wardline-request-id']
    const [entry] = (await h.audit()).filter((e) => e.request_id === id)
    expect(entry.reason_code).toBe('route.unknown_server')
    expect('server' in entry).toBe(false)
  })
})
