import { type IncomingMessage, type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setMaxListeners } from 'node:events'
import { MCP_HEADERS, as, rpc } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { waitFor } from '../helpers/wait'

const INIT = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }, 0)

/**
 * One caller trying to make another server's callers wait: legacy streams whose endpoint event never
 * comes (many of them, at a server with `connections: 1`), and an endpoint event that never ends.
 */
describe('red team: stalls across servers', () => {
  let h: ServersHarness
  let odd: Server
  let hugeSent = 0
  const posts: string[] = []
  beforeAll(async () => {
    odd = createServer((req, res) => {
      if (req.method === 'POST') {
        posts.push(req.url ?? '')
        req.resume()
        req.on('end', () => res.writeHead(202).end())
        return
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      res.flushHeaders()
      if (req.url !== '/huge') return // /silent: never an event
      res.write('event: endpoint\ndata: /')
      const chunk = 'a'.repeat(64 * 1024)
      const pump = (): void => {
        // Stops at 64 MiB: far past any bound the gateway holds an event to.
        while (hugeSent < 64 * 1024 * 1024 && !res.destroyed) {
          hugeSent += chunk.length
          if (!res.write(chunk)) return void res.once('drain', pump)
        }
      }
      pump()
    })
    await new Promise<void>((r) => odd.listen(0, '127.0.0.1', r))
    const base = `http://127.0.0.1:${(odd.address() as AddressInfo).port}`
    h = await startServersHarness(
      {
        docs: {},
        silent: { url: `${base}/silent`, transport: 'sse', connections: 1 },
        huge: { url: `${base}/huge`, transport: 'sse' },
      },
      { upstream_health_check: { enabled: false } },
    )
  })
  afterAll(async () => {
    await h.close()
    odd.closeAllConnections()
    await new Promise((r) => odd.close(r))
  })

  async function docsAnswersQuickly(): Promise<void> {
    const started = performance.now()
    const reply = await send(`${h.url}/mcp/docs`, 'POST', { ...MCP_HEADERS, ...as('bob') }, JSON.stringify(INIT))
    expect(reply.status).toBe(200)
    expect(performance.now() - started).toBeLessThan(1000)
  }

  test('50 streams waiting for an endpoint event at a connections: 1 server stall neither docs nor that server’s own POSTs', async () => {
    const controller = new AbortController()
    setMaxListeners(100, controller.signal)
    const streams: IncomingMessage[] = []
    try {
      for (let i = 0; i < 50; i++) {
        streams.push(
          await open(`${h.url}/mcp/silent`, { headers: { accept: 'text/event-stream', ...as('mallory') }, signal: controller.signal }),
        )
      }
      expect(streams.every((s) => s.statusCode === 200)).toBe(true)
      await docsAnswersQuickly()
      const reply = await send(
        h.url,
        'POST',
        { ...MCP_HEADERS, ...as('bob') },
        JSON.stringify(rpc('ping')),
        '/mcp/silent/messages?sessionId=s',
      )
      expect(reply.status).toBe(202)
      expect(posts).toContain('/messages?sessionId=s')
    } finally {
      controller.abort()
      for (const s of streams) s.on('error', () => undefined)
    }
  })

  test('an endpoint event that never ends is cut at the event bound (audited as the upstream’s failure); docs is not slowed', async () => {
    const controller = new AbortController()
    const res = await open(`${h.url}/mcp/huge`, { headers: { accept: 'text/event-stream', ...as('mallory') }, signal: controller.signal })
    res.on('error', () => undefined)
    let received = 0
    res.on('data', (c: Buffer) => (received += c.length))
    const id = res.headers['x-wardline-request-id']
    try {
      await docsAnswersQuickly()
      await new Promise<void>((resolve) => {
        res.on('close', resolve)
        res.on('end', resolve)
      })
      // Nothing of the unfinished event reached the client, and the upstream was not read to its end.
      expect(received).toBeLessThan(1024)
      expect(hugeSent).toBeLessThan(64 * 1024 * 1024)
      await waitFor(async () => (await h.audit()).some((e) => e.request_id === id), { what: 'the stream’s audit entry' })
      const entry = (await h.audit()).filter((e) => e.request_id === id)
      expect(entry).toHaveLength(1)
      expect(entry[0]).toMatchObject({ server: 'huge', decision: 'error' })
    } finally {
      controller.abort()
    }
  })
})
