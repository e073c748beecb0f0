import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { dirname } from 'node:path'
import { silentLogger } from '../../src/log'
import { type RouteConfig, routesOf, sharedStages } from '../../src/server/chain'
import { gatewayMetrics } from '../../src/server/compose'
import { openRoute } from '../../src/server/route'
import { Router } from '../../src/server/router'
import { openAudit } from '../../src/audit/open'
import { openAuth } from '../../src/auth/open'
import { MCP_HEADERS, as, configFrom, rpc, toolCall } from '../helpers/harness'
import { open, readAll, send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { waitFor } from '../helpers/wait'

/** What a raw MCP-ish server saw of one request. */
interface Seen {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage['headers']
}

/**
 * A plain HTTP server speaking just enough Streamable HTTP for these tests: a POST is answered with a
 * JSON-RPC result (an `initialize` also with a session id), or never with `hang`; a GET asking for
 * text/event-stream opens a stream the test writes events into; any other GET (the gateway's probe) 405.
 */
interface StreamServer {
  readonly url: string
  readonly server: Server
  readonly seen: Seen[]
  /** Open GET streams, oldest first. */
  readonly streams: ServerResponse[]
  /** Writes one JSON-RPC notification carrying `text` into every open stream. */
  push(text: string): void
  connections(): Promise<number>
  close(): Promise<void>
}

async function startStreamServer(options: { hang?: boolean } = {}): Promise<StreamServer> {
  const seen: Seen[] = []
  const streams: ServerResponse[] = []
  const server = createServer((req, res) => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers })
    if (req.method === 'GET') {
      if (!String(req.headers.accept ?? '').includes('text/event-stream')) return void res.writeHead(405).end()
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      res.flushHeaders()
      streams.push(res)
      res.on('close', () => streams.splice(streams.indexOf(res), 1))
      return
    }
    void readAll(req).then((body) => {
      if (options.hang) return
      const message = JSON.parse(body) as { id?: number; method?: string }
      const result =
        message.method === 'initialize'
          ? { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'raw', version: '1' } }
          : {}
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'raw-session' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id ?? null, result }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    server,
    seen,
    streams,
    push(text) {
      const event = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: text } })
      for (const s of streams) s.write(`event: message\ndata: ${event}\n\n`)
    },
    connections: () => new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n)))),
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const INITIALIZE = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } })

/** A POST to `path` at the gateway as alice; its status. */
async function post(h: ServersHarness, path: string, body: unknown = toolCall('echo', { text: 'hi' })): Promise<number> {
  return (await send(`${h.url}${path}`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(body))).status
}

/** The gateway's config with `servers` (and any other keys) replaced, read as the file would be. */
function reloaded(h: ServersHarness, tree: Record<string, unknown>) {
  return configFrom({ ...h.tree, ...tree }, {}, dirname(h.auditFile))
}

/** The harness's `servers:` entries as its file has them. */
function serversOf(h: ServersHarness): Record<string, Record<string, unknown>> {
  return h.tree.servers as Record<string, Record<string, unknown>>
}

/** Opens the standalone GET stream of the raw server's session through the gateway at `path`. */
async function openStream(h: ServersHarness, path: string): Promise<{ res: IncomingMessage; received: () => string }> {
  const init = await send(`${h.url}${path}`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(INITIALIZE))
  expect(init.status).toBe(200)
  const session = String(init.headers['mcp-session-id'])
  const res = await open(`${h.url}${path}`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session, ...as('alice') } })
  expect(res.statusCode).toBe(200)
  let text = ''
  res.on('data', (c: Buffer) => (text += c.toString('utf8')))
  res.on('error', () => undefined)
  return { res, received: () => text }
}

describe('reloading the map of servers', () => {
  let raw: StreamServer[] = []
  let h: ServersHarness | null = null
  afterEach(async () => {
    await h?.close()
    h = null
    await Promise.all(raw.map((s) => s.close()))
    raw = []
  })

  test('a removed server: new requests 404, its open GET stream keeps working until closed, then its connections close', async () => {
    const gone = await startStreamServer()
    raw.push(gone)
    h = await startServersHarness({ docs: {}, gone: { url: gone.url, headers: { 'X-Api-Key': 'gone-secret' } } })
    expect(await post(h, '/mcp/gone')).toBe(200) // a kept-alive connection in its pool
    const stream = await openStream(h, '/mcp/gone')
    await waitFor(() => gone.streams.length === 1, { what: 'the stream at the upstream' })
    expect(await h.gateway.metrics.registry.metrics()).toMatch(/wardline_upstream_up\{server="gone"\}/)

    expect(h.gateway.reload(reloaded(h, { servers: { docs: serversOf(h).docs } }))).toEqual([])
    expect(await post(h, '/mcp/gone')).toBe(404)
    expect(await post(h, '/mcp/docs', INITIALIZE)).toBe(200)
    // Its probe's series go with it rather than report its last result for ever; its request series
    // stay while a request of its own (the stream) still runs.
    expect(await h.gateway.metrics.registry.metrics()).not.toMatch(/wardline_upstream_up\{server="gone"\}/)

    // The stream opened before the reload still carries what its server sends, on the old settings.
    gone.push('after the reload')
    await waitFor(() => stream.received().includes('after the reload'), { what: 'an event on the old stream' })
    const get = gone.seen.find((s) => s.method === 'GET' && s.headers.accept === 'text/event-stream')
    expect(get?.headers['x-api-key']).toBe('gone-secret')
    // Held open by the stream: the retired route is not closed while it runs (the retire check is every 500 ms).
    await new Promise((resolve) => setTimeout(resolve, 1200))
    expect(await gone.connections()).toBeGreaterThan(0)

    stream.res.destroy()
    await waitFor(async () => (await gone.connections()) === 0, { what: "the removed server's connections to close" })
    // Closed: none of its series is left.
    await waitFor(async () => !/server="gone"/.test(await h!.gateway.metrics.registry.metrics()), {
      what: "the removed server's series to go",
    })
    // The stream's one audit entry, written when it ended.
    const entries = await h.audit()
    expect(entries.filter((e) => e.method === 'GET' && e.status === 200)).toHaveLength(1)
  })

  test('a changed server: its open stream stays on the old url and headers, new requests take the new ones', async () => {
    const before = await startStreamServer()
    const after = await startStreamServer()
    raw.push(before, after)
    h = await startServersHarness({ docs: {}, raw: { url: before.url, headers: { 'X-Api-Key': 'old' } } })
    const stream = await openStream(h, '/mcp/raw')
    await waitFor(() => before.streams.length === 1, { what: 'the stream at the old upstream' })

    h.gateway.reload(reloaded(h, { servers: { docs: serversOf(h).docs, raw: { url: after.url, headers: { 'X-Api-Key': 'new' } } } }))
    expect(await post(h, '/mcp/raw', INITIALIZE)).toBe(200)
    expect(after.seen.filter((s) => s.method === 'POST').map((s) => s.headers['x-api-key'])).toEqual(['new'])
    expect(before.seen.filter((s) => s.method === 'POST')).toHaveLength(1) // the initialize before the reload

    before.push('old stream lives')
    await waitFor(() => stream.received().includes('old stream lives'), { what: 'an event on the old stream' })
    expect(before.seen.find((s) => s.method === 'GET' && s.headers.accept === 'text/event-stream')?.headers['x-api-key']).toBe('old')
    stream.res.destroy()
    await waitFor(async () => (await before.connections()) === 0, { what: "the old upstream's connections to close" })
    expect(await post(h, '/mcp/raw', INITIALIZE)).toBe(200)
  })

  test('an added server is reached, reported in /readyz, and default_server moves', async () => {
    h = await startServersHarness({ docs: {}, tickets: {} }, { default_server: 'docs' })
    const extra = await startStreamServer()
    raw.push(extra)
    expect(await post(h, '/mcp/extra', INITIALIZE)).toBe(404)
    const docsBefore = h.upstreams.docs.seen.length
    expect(await post(h, '/mcp', INITIALIZE)).toBe(200)
    expect(h.upstreams.docs.seen.length).toBe(docsBefore + 1)

    const servers = h.tree.servers as Record<string, unknown>
    h.gateway.reload(reloaded(h, { servers: { ...servers, extra: { url: extra.url } }, default_server: 'tickets' }))
    expect(await post(h, '/mcp/extra', INITIALIZE)).toBe(200)
    const ticketsBefore = h.upstreams.tickets.seen.length
    expect(await post(h, '/mcp', INITIALIZE)).toBe(200)
    expect(h.upstreams.tickets.seen.length).toBe(ticketsBefore + 1)
    expect(h.upstreams.docs.seen.length).toBe(docsBefore + 1)

    const ready = await waitFor(
      async () => {
        const body = (await (await fetch(`${h!.url}/readyz`)).json()) as {
          checks: { servers: { servers: Record<string, { ok: boolean }> } }
        }
        return body.checks.servers.servers.extra?.ok === true && body
      },
      { what: 'the added server in /readyz' },
    )
    expect(Object.keys(ready.checks.servers.servers).sort()).toEqual(['docs', 'extra', 'tickets'])
  })

  test('an unchanged server keeps its connections and its callers keep their budget counts', async () => {
    const docs = await startStreamServer()
    const tickets = await startStreamServer()
    raw.push(docs, tickets)
    h = await startServersHarness(
      { docs: { url: docs.url }, tickets: { url: tickets.url } },
      { features: { budget_enforcement: true }, budget: { requests_per_window: 3, window_seconds: 3600 } },
    )
    let connections = 0
    docs.server.on('connection', () => connections++)
    expect(await post(h, '/mcp/docs')).toBe(200)
    expect(await post(h, '/mcp/docs')).toBe(200)
    const opened = connections
    const servers = h.tree.servers as Record<string, Record<string, unknown>>
    h.gateway.reload(reloaded(h, { servers: { docs: servers.docs, tickets: { ...servers.tickets, connections: 3 } } }))
    expect(await post(h, '/mcp/docs')).toBe(200)
    expect(connections).toBe(opened) // the same pool: no new connection to an unchanged server
    expect(await post(h, '/mcp/docs')).toBe(429)
    expect(await post(h, '/mcp/tickets')).toBe(429) // identity buckets are global across servers
  })

  test('a reload while shutting down changes nothing', async () => {
    h = await startServersHarness({ docs: {} }, { shutdown_delay_seconds: 0 })
    const extra = await startStreamServer()
    raw.push(extra)
    const stopping = h.gateway.shutdown()
    expect(h.gateway.reload(reloaded(h, { servers: { ...(h.tree.servers as object), extra: { url: extra.url } } }))).toEqual([])
    await stopping
    expect(extra.seen).toHaveLength(0)
  })
})

describe('one server cannot starve another', () => {
  test('server A hangs every call with connections: 2; B answers at once; a down server answers its callers 502', async () => {
    const hung = await startStreamServer({ hang: true })
    const h = await startServersHarness({
      a: { url: hung.url, connections: 2, timeout_seconds: 30 },
      b: {},
      down: { url: 'http://127.0.0.1:9/mcp' },
    })
    const pending: Array<Promise<unknown>> = []
    const aborts: AbortController[] = []
    try {
      for (let i = 0; i < 6; i++) {
        const abort = new AbortController()
        aborts.push(abort)
        pending.push(
          fetch(`${h.url}/mcp/a`, {
            method: 'POST',
            headers: { ...MCP_HEADERS, ...as(`caller-${i}`) },
            body: JSON.stringify(toolCall('echo', { text: 'x' })),
            signal: abort.signal,
          }).catch(() => undefined),
        )
      }
      await waitFor(() => hung.seen.filter((s) => s.method === 'POST').length === 2, { what: 'A holding both its connections' })
      const started = performance.now()
      expect(await post(h, '/mcp/b', INITIALIZE)).toBe(200)
      expect(performance.now() - started).toBeLessThan(1000)
      expect(await post(h, '/mcp/down', INITIALIZE)).toBe(502)
      expect(await post(h, '/mcp/b', INITIALIZE)).toBe(200)
      // A's queue stays A's: still two at its upstream, the rest waiting in its own pool.
      expect(hung.seen.filter((s) => s.method === 'POST')).toHaveLength(2)
    } finally {
      for (const abort of aborts) abort.abort()
      await Promise.all(pending)
      await h.close()
      await hung.close()
    }
  })
})

describe('Router.reload is all or nothing', () => {
  test('a server that cannot be opened fails the reload, names it, and leaves the map and the other new routes closed', async () => {
    const upstream = await startStreamServer()
    const other = await startStreamServer()
    const config = configFrom({
      listen: '127.0.0.1:0',
      servers: { docs: { url: upstream.url } },
      auth: { mode: 'header' },
      audit: { output: 'stdout' },
    })
    const log = silentLogger()
    const metrics = gatewayMetrics(false)
    const audit = await openAudit(config, null, null, metrics.audit, log)
    const auth = await openAuth(config, null, metrics.revocations, log)
    const shared = sharedStages(config, { auth, audit, budget: null }, metrics, log)
    const opened: string[] = []
    const open = (route: RouteConfig) => {
      if (route.server === 'broken') throw new Error('no pool for you')
      opened.push(route.server ?? '')
      return openRoute(route, config, shared, audit.trail, metrics.upstream, log)
    }
    const router = new Router(routesOf(config), null, { shared, audit: audit.trail, log, open })
    try {
      const next = configFrom({
        listen: '127.0.0.1:0',
        servers: { docs: { url: upstream.url }, fresh: { url: other.url }, broken: { url: other.url } },
        auth: { mode: 'header' },
        audit: { output: 'stdout' },
      })
      expect(() => router.reload(routesOf(next), null)).toThrow(/server "broken" could not be opened: no pool for you/)
      expect([...router.routes.keys()]).toEqual(['docs'])
      expect(opened).toEqual(['docs', 'fresh'])
      // The route opened for `fresh` before the failure was closed: its probe connects no more.
      const probes = other.seen.length
      await new Promise((resolve) => setTimeout(resolve, 300))
      expect(other.seen.length).toBe(probes)
      expect(await other.connections()).toBe(0)
    } finally {
      for (const close of router.closers) await close()
      for (const close of [...(auth.closers ?? [])].reverse()) await close()
      await audit.trail.close()
      await upstream.close()
      await other.close()
    }
  })
})
