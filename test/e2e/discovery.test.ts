/**
 * OAuth/OpenID discovery GETs, as MCP clients send them at every start without a token: mcp-remote
 * 0.15.1 (the bridge Claude Desktop uses) sends exactly the six below for http://host/mcp (its
 * buildProtectedResourceMetadataUrls and getMetadataUrls; observed against a real gateway: six
 * `unauthorized` audit entries before, none after). The gateway answers them itself: its own RFC 9728
 * metadata when auth.resource_metadata is set, 404 otherwise, never proxied, never audited.
 */
import { type Harness, startHarness } from '../helpers/harness'

const MCP_REMOTE_DISCOVERY = [
  '/.well-known/oauth-protected-resource/mcp',
  '/.well-known/oauth-protected-resource',
  '/.well-known/oauth-authorization-server/mcp',
  '/.well-known/oauth-authorization-server',
  '/.well-known/openid-configuration/mcp',
  '/mcp/.well-known/openid-configuration',
]

/** What mcp-remote's fetch sends: no Authorization, no identity. */
const DISCOVERY_HEADERS = { accept: 'application/json', 'accept-encoding': 'identity' }

let h: Harness
beforeAll(async () => {
  h = await startHarness({ mode: 'stateless-json' })
})
afterAll(async () => {
  await h.close()
})

async function newEntries(act: () => Promise<void>): Promise<{ entries: number; reached: number }> {
  const entries = (await h.audit()).length
  const reached = h.upstream.seen.length
  await act()
  return { entries: (await h.audit()).length - entries, reached: h.upstream.seen.length - reached }
}

test("mcp-remote's six discovery GETs get 404 as they do direct: no audit entry, nothing upstream", async () => {
  const direct = new URL(h.upstream.url).origin
  for (const path of MCP_REMOTE_DISCOVERY)
    expect([path, (await fetch(`${direct}${path}`, { headers: DISCOVERY_HEADERS })).status]).toEqual([path, 404])
  const observed = await newEntries(async () => {
    for (const path of MCP_REMOTE_DISCOVERY) {
      const res = await fetch(`${h.url}${path}`, { headers: DISCOVERY_HEADERS })
      expect([path, res.status]).toEqual([path, 404])
      expect(res.headers.get('content-type')).toBe('application/json')
      expect(res.headers.get('www-authenticate')).toBeNull()
      expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 404, message: 'Not found' } })
    }
    // The SDK client's own list adds the root OpenID form and a query; HEAD is answered alike.
    expect((await fetch(`${h.url}/.well-known/openid-configuration?x=1`)).status).toBe(404)
    const head = await fetch(`${h.url}/.well-known/oauth-authorization-server/mcp`, { method: 'HEAD' })
    expect([head.status, await head.text()]).toEqual([404, ''])
  })
  expect(observed).toEqual({ entries: 0, reached: 0 })
})

test('anything else under /.well-known/ and any other method still needs a token, and its 401 is audited', async () => {
  const observed = await newEntries(async () => {
    expect((await fetch(`${h.url}/.well-known/other`)).status).toBe(401)
    expect((await fetch(`${h.url}/.well-known/oauth-authorization-server`, { method: 'POST', body: '{}' })).status).toBe(401)
    expect((await fetch(`${h.url}/.well-known/openid-configurationx`)).status).toBe(401)
  })
  expect(observed).toEqual({ entries: 3, reached: 0 })
  expect((await h.audit()).slice(-3).map((e) => e.decision)).toEqual(['unauthorized', 'unauthorized', 'unauthorized'])
})

test('with auth.resource_metadata the protected-resource paths serve it; the authorization-server ones stay 404', async () => {
  const served = await startHarness({
    mode: 'stateless-json',
    config: {
      auth: {
        mode: 'header',
        resource_metadata: { resource: 'https://mcp.example/mcp', authorization_servers: ['https://idp.example'] },
      },
    },
  })
  try {
    const statuses: Array<[string, number]> = []
    for (const path of MCP_REMOTE_DISCOVERY) {
      const res = await fetch(`${served.url}${path}`, { headers: DISCOVERY_HEADERS })
      statuses.push([path, res.status])
      if (res.status === 200) {
        expect(await res.json()).toEqual({
          resource: 'https://mcp.example/mcp',
          authorization_servers: ['https://idp.example'],
          bearer_methods_supported: ['header'],
        })
      }
    }
    expect(statuses).toEqual(
      MCP_REMOTE_DISCOVERY.map((path) => [path, path.startsWith('/.well-known/oauth-protected-resource') ? 200 : 404]),
    )
    expect(await served.audit()).toEqual([])
  } finally {
    await served.close()
  }
})
