import { Agent, request } from 'node:http'
import { connect } from 'node:net'
import { startRawUpstream } from '../e2e/raw-upstream'
import { join } from 'node:path'
import type { BudgetStore } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { startGateway } from '../../src/server/compose'
import { MCP_HEADERS, as, configFrom, readJsonl, startHarness, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

describe('shutdown with a stream still open', () => {
  test('a stream cut at the end of the grace period still gets its audit entry before the trail closes', async () => {
    const upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message"}\n\n') // then stays open
    })
    const h = await startHarness({ upstreamUrl: upstream.url, config: { shutdown_grace_seconds: 0.2 } })
    try {
      const firstEvent = new Promise<void>((resolve, reject) => {
        const req = request(`${h.url}/mcp`, { method: 'GET', headers: { accept: 'text/event-stream', ...as('alice') } }, (res) => {
          res.once('data', () => resolve())
          res.on('error', () => undefined)
        })
        req.on('error', reject)
        req.end()
      })
      await firstEvent
      await h.gateway.shutdown()
      const entries = readJsonl(h.auditFile)
      expect(entries).toHaveLength(1)
      expect(entries[0]).toMatchObject({
        method: 'GET',
        identity: 'alice',
        decision: 'passthrough',
        status: 200,
        reason_code: 'shutdown.cut',
        reason: 'connection closed by the gateway at shutdown (shutdown_grace_seconds passed)',
      })
    } finally {
      await h.upstream.close()
      await upstream.close()
    }
  })
})

describe('draining keep-alive connections', () => {
  test('at shutdown the idle keep-alive connection is closed, and a response still in flight says Connection: close', async () => {
    const notHeldYet = (): void => undefined
    let release = notHeldYet
    const upstream = await startRawUpstream((req, res) => {
      const answer = (): void => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{"jsonrpc":"2.0","id":1,"result":{}}')
      }
      if (req.url === '/slow')
        release = answer // holds the drain open until the test releases it
      else answer()
    })
    const h = await startHarness({ upstreamUrl: upstream.url, config: { shutdown_grace_seconds: 5 } })
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    const get = (path: string): Promise<{ status: number; connection: string | undefined }> =>
      new Promise((resolve, reject) => {
        request(`${h.url}${path}`, { agent, headers: as('alice') }, (res) => {
          res.resume()
          res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }))
        })
          .on('error', reject)
          .end()
      })
    try {
      expect(await get('/first')).toEqual({ status: 200, connection: 'keep-alive' })
      const slow = fetch(`${h.url}/slow`, { headers: as('bob') }) // in flight across the shutdown
      await waitFor(() => release !== notHeldYet, { what: 'the upstream to hold the slow request' })
      const stopped = h.gateway.shutdown()
      // The idle keep-alive connection was closed with the listener; a request on a connection that
      // was busy is still answered, and told the connection ends with it.
      await expect(get('/after')).rejects.toThrow()
      release()
      expect((await slow).headers.get('connection')).toBe('close')
      await stopped
    } finally {
      agent.destroy()
      await h.upstream.close()
      await upstream.close()
    }
  })
})

describe('request_timeout_seconds', () => {
  test('a client trickling its body is cut off with 408, and the request is still audited', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: { request_timeout_seconds: 0.5 } })
    try {
      const socket = connect(Number(new URL(h.url).port), '127.0.0.1')
      let reply = ''
      socket.on('data', (c: Buffer) => (reply += c.toString('utf8')))
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()))
      socket.write(
        'POST /mcp HTTP/1.1\r\nhost: x\r\nx-wardline-identity: alice\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"jsonrpc"',
      )
      const started = performance.now()
      await closed
      // Left to Node's default (requestTimeout 300 s) the trickle would be waited for; 10 s is 20× the
      // 0.5 s under test and far below that, so a loaded machine cannot fail it.
      expect(performance.now() - started).toBeLessThan(10_000)
      expect(reply).toMatch(/^HTTP\/1\.1 408 /)
      expect((await h.audit()).at(-1)).toMatchObject({
        identity: 'alice',
        decision: 'error',
        status: 408,
        reason: 'request not received within request_timeout_seconds',
      })
    } finally {
      await h.close()
    }
  })
})

describe('shutdown keeps what an entry already says', () => {
  test('a call admitted because its budget check failed open, cut at shutdown, still says it failed open', async () => {
    const upstream = await startRawUpstream(() => undefined) // takes the call and never answers
    const dir = tempDir()
    const auditFile = join(dir, 'audit.jsonl')
    const config = configFrom(
      {
        listen: '127.0.0.1:0',
        upstream: upstream.url,
        auth: { mode: 'header' },
        audit: { output: auditFile },
        shutdown_grace_seconds: 0.2,
        features: { budget_enforcement: true },
        budget: { requests_per_window: 10, window_seconds: 60, on_store_error: 'open' },
      },
      {},
      dir,
    )
    // A store whose every check fails: the port's failure path, as a database outage would take it.
    const failing: BudgetStore = {
      admit: () => Promise.reject(new Error('store down for this test')),
      refund: () => Promise.reject(new Error('store down for this test')),
      close: () => Promise.resolve(),
    }
    const gateway = await startGateway(config, { log: silentLogger(), budgetStore: failing })
    try {
      const call = fetch(gateway.url, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo', { message: 'hi' })),
      }).catch(() => null) // the gateway cuts it
      await waitFor(() => upstream.seen.length === 1, { what: 'the call to reach the upstream' })
      await gateway.shutdown()
      await call
      const entries = readJsonl(auditFile)
      expect(entries).toHaveLength(1)
      expect(entries[0].reason).toBe(
        'budget check failed open: store down for this test; connection closed by the gateway at shutdown (shutdown_grace_seconds passed)',
      )
      expect(entries[0].reason_code).toBe('shutdown.cut')
    } finally {
      await upstream.close()
    }
  })
})
