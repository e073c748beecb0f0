/**
 * RFC 9728 protected-resource metadata per server: each server's document names its own URL at the
 * gateway, a 401 for /mcp/<name> points at it, and the official SDK client's OAuth discovery asks the
 * authorization server for a token for that server's resource.
 */
import { type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { dirname } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { serverMetadataUrl, serverResource } from '../../src/auth/resource-metadata'
import { MCP_HEADERS, configFrom, rpc } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { SECRET } from '../auth/forge'

describe('serverResource and serverMetadataUrl', () => {
  test.each([
    ['https://mcp.example.com/mcp', 'https://mcp.example.com/mcp/docs'],
    ['https://mcp.example.com/mcp/', 'https://mcp.example.com/mcp/docs'],
    ['https://mcp.example.com', 'https://mcp.example.com/mcp/docs'],
    ['https://example.com/tools/mcp?x=1', 'https://example.com/tools/mcp/docs'],
    ['https://example.com/tools', 'https://example.com/tools/mcp/docs'],
    ['https://example.com/mcpx', 'https://example.com/mcpx/mcp/docs'],
  ])('resource %s', (resource, expected) => expect(serverResource(resource, 'docs')).toBe(expected))

  test.each([
    [
      'https://mcp.example.com/.well-known/oauth-protected-resource/mcp',
      'https://mcp.example.com/.well-known/oauth-protected-resource/mcp/docs',
    ],
    [
      'https://mcp.example.com/.well-known/oauth-protected-resource',
      'https://mcp.example.com/.well-known/oauth-protected-resource/mcp/docs',
    ],
    [
      'https://example.com/gw/.well-known/oauth-protected-resource/x',
      'https://example.com/gw/.well-known/oauth-protected-resource/mcp/docs',
    ],
    ['https://idp.example.com/metadata/mcp.json', null],
  ])('metadata url %s', (url, expected) => expect(serverMetadataUrl(url, 'docs')).toBe(expected))
})

/** A port free now, for a gateway whose configured URLs must name its own address. */
async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** The smallest RFC 8414 authorization server: its metadata document, nothing else. */
async function startAuthorizationServer(): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const { port } = server.address() as AddressInfo
    const issuer = `http://127.0.0.1:${port}`
    if (req.url?.startsWith('/.well-known/oauth-authorization-server')) {
      res.writeHead(200, { 'content-type': 'application/json' })
      return void res.end(
        JSON.stringify({
          issuer,
          authorization_endpoint: `${issuer}/authorize`,
          token_endpoint: `${issuer}/token`,
          response_types_supported: ['code'],
          code_challenge_methods_supported: ['S256'],
        }),
      )
    }
    res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server }
}

/** What the SDK client would send its user to: the authorization URL, with its `resource` parameter. */
async function authorizationRequest(serverUrl: string): Promise<URL> {
  let redirected: URL | null = null
  const provider: OAuthClientProvider = {
    redirectUrl: 'http://127.0.0.1/callback',
    clientMetadata: { redirect_uris: ['http://127.0.0.1/callback'], client_name: 't' },
    clientInformation: () => ({ client_id: 'test-client' }),
    tokens: () => undefined,
    saveTokens: () => undefined,
    redirectToAuthorization: (url) => void (redirected = url),
    saveCodeVerifier: () => undefined,
    codeVerifier: () => 'v',
  }
  const client = new Client({ name: 't', version: '1' })
  await expect(client.connect(new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider }))).rejects.toThrow(
    /Unauthorized/,
  )
  if (redirected === null) throw new Error('the SDK client never asked for authorization')
  return redirected
}

describe('RFC 9728 metadata per server', () => {
  let h: ServersHarness
  let as: { url: string; server: Server }
  let base: string
  beforeAll(async () => {
    as = await startAuthorizationServer()
    const port = await freePort()
    base = `http://127.0.0.1:${port}`
    h = await startServersHarness(
      { docs: {}, tickets: {} },
      {
        listen: `127.0.0.1:${port}`,
        default_server: 'docs',
        auth: {
          mode: 'jwt',
          jwt: { secret: SECRET },
          resource_metadata_url: `${base}/.well-known/oauth-protected-resource/mcp`,
          resource_metadata: { resource: `${base}/mcp`, authorization_servers: [as.url], scopes_supported: ['mcp'] },
        },
      },
    )
  })
  afterAll(async () => {
    await h.close()
    await new Promise<void>((resolve) => as.server.close(() => resolve()))
  })

  const metadata = async (path: string): Promise<{ status: number; body: Record<string, unknown> | null }> => {
    const res = await fetch(`${h.url}/.well-known/oauth-protected-resource${path}`)
    return { status: res.status, body: res.ok ? ((await res.json()) as Record<string, unknown>) : (await res.text(), null) }
  }

  test("each server's document names its URL at the gateway; the root and /mcp keep the configured resource; unknown names 404", async () => {
    expect(await metadata('/mcp/docs')).toEqual({
      status: 200,
      body: {
        resource: `${base}/mcp/docs`,
        authorization_servers: [as.url],
        scopes_supported: ['mcp'],
        bearer_methods_supported: ['header'],
      },
    })
    expect((await metadata('/mcp/tickets')).body?.resource).toBe(`${base}/mcp/tickets`)
    expect((await metadata('/mcp')).body?.resource).toBe(`${base}/mcp`)
    expect((await metadata('')).body?.resource).toBe(`${base}/mcp`)
    for (const path of ['/mcp/nope', '/mcp/Docs', '/mcp/docs/x', '/mcp/'])
      expect([path, (await metadata(path)).status]).toEqual([path, 404])
  })

  test("a 401 for /mcp/<name> points at that server's document; /mcp and unknown paths at the configured one", async () => {
    const challenge = async (path: string): Promise<string> => {
      const reply = await send(`${h.url}${path}`, 'POST', MCP_HEADERS, JSON.stringify(rpc('tools/list')))
      expect(reply.status).toBe(401)
      return String(reply.headers['www-authenticate'])
    }
    expect(await challenge('/mcp/docs')).toBe(
      `Bearer realm="wardline", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/docs"`,
    )
    expect(await challenge('/mcp/tickets')).toContain(`resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/tickets"`)
    expect(await challenge('/mcp')).toBe(`Bearer realm="wardline", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`)
    expect(await challenge('/mcp/nope')).toContain(`resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`)
  })

  test("the SDK client's OAuth discovery asks for a token for the server's own resource", async () => {
    const docs = await authorizationRequest(`${h.url}/mcp/docs`)
    expect(docs.origin + docs.pathname).toBe(`${as.url}/authorize`)
    expect(docs.searchParams.get('resource')).toBe(`${base}/mcp/docs`)
    expect((await authorizationRequest(`${h.url}/mcp/tickets`)).searchParams.get('resource')).toBe(`${base}/mcp/tickets`)
    // The default server at /mcp: the configured resource, which the client accepts for that URL.
    expect((await authorizationRequest(`${h.url}/mcp`)).searchParams.get('resource')).toBe(`${base}/mcp`)
  })

  test('a reload keeps the documents in step with the map', async () => {
    const servers = h.tree.servers as Record<string, unknown>
    h.gateway.reload(configFrom({ ...h.tree, servers: { docs: servers.docs, extra: servers.tickets } }, {}, dirname(h.auditFile)))
    expect((await metadata('/mcp/extra')).body?.resource).toBe(`${base}/mcp/extra`)
    expect((await metadata('/mcp/tickets')).status).toBe(404)
    h.gateway.reload(configFrom(h.tree, {}, dirname(h.auditFile)))
    expect((await metadata('/mcp/tickets')).status).toBe(200)
  })
})
