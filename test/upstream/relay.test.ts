/**
 * The relay (RelayHandler in src/upstream/forward.ts), driven through `Upstream.forward(ex)` as the
 * gateway drives it: a tiny node:http server on port 0 makes a real Exchange of each client request
 * and forwards it to a real upstream on port 0 whose answer each test writes by hand. On a rejected
 * forward it answers 502 itself when nothing was sent yet, as server/gateway.ts does.
 */
import { type ClientRequest, type IncomingMessage, type ServerResponse, createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import type { UpstreamConfig } from '../../src/config/types'
import { Exchange } from '../../src/pipeline/exchange'
import { NOTE, addNote, hasNote } from '../../src/pipeline/reason'
import { Upstream } from '../../src/upstream/forward'
import { type RawUpstream, type SeenRequest, closedPort, gate, startRawUpstream } from '../e2e/raw-upstream'

type Answer = (req: IncomingMessage, res: ServerResponse, seen: SeenRequest) => void | Promise<void>

/** One forwarded request as the caller of forward() saw it. */
interface Forwarded {
  readonly ex: Exchange
  /** How forward() settled, and whether anything had been sent to the client by then. */
  readonly settled: Promise<{ rejected: unknown; headersSentAtSettle: boolean }>
}

interface Relay {
  readonly port: number
  readonly url: string
  readonly upstream: RawUpstream
  /** The next request the stand-in gateway forwards. */
  next(): Promise<Forwarded>
  close(): Promise<void>
}

const BASE_CONFIG: UpstreamConfig = { url: 'http://127.0.0.1:1', timeoutSeconds: 5, connections: 4, healthCheck: null }

let open: Relay[] = []
afterEach(async () => {
  await Promise.all(open.map((r) => r.close()))
  open = []
})

/**
 * An upstream answering with `answer`, an Upstream in front of it, and a server turning each request
 * into an Exchange (prepared by `prepare`, as the stages would) that it forwards.
 */
async function startRelay(
  answer: Answer,
  options: { config?: Partial<UpstreamConfig>; upstreamUrl?: string; prepare?: (ex: Exchange) => void | Promise<void> } = {},
): Promise<Relay> {
  const raw = await startRawUpstream(answer)
  const upstream = new Upstream({ ...BASE_CONFIG, url: options.upstreamUrl ?? raw.url, ...options.config })
  const forwarded: Forwarded[] = []
  const waiting: Array<(f: Forwarded) => void> = []
  let n = 0
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = []
      try {
        for await (const chunk of req) chunks.push(chunk as Buffer)
      } catch {
        // the client left mid-body; forward() finds the response destroyed
      }
      const ex = new Exchange(req, res, `relay-${++n}`, Date.now(), performance.now())
      ex.body = req.method === 'GET' || req.method === 'HEAD' ? null : Buffer.concat(chunks)
      await options.prepare?.(ex)
      const settled = upstream.forward(ex).then(
        () => ({ rejected: undefined, headersSentAtSettle: res.headersSent }),
        (err: unknown) => ({ rejected: err ?? new Error('rejected with nothing'), headersSentAtSettle: res.headersSent }),
      )
      const record = { ex, settled }
      const waiter = waiting.shift()
      if (waiter) waiter(record)
      else forwarded.push(record)
      const outcome = await settled
      if (outcome.rejected !== undefined && !res.headersSent && !res.destroyed) {
        res.writeHead(502, { 'content-type': 'text/plain' }).end('answered by the caller')
      }
    })()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  const relay: Relay = {
    port,
    url: `http://127.0.0.1:${port}`,
    upstream: raw,
    next: () => {
      const ready = forwarded.shift()
      return ready ? Promise.resolve(ready) : new Promise((resolve) => waiting.push(resolve))
    },
    close: async () => {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
      await upstream.destroy()
      await raw.close()
    },
  }
  open.push(relay)
  return relay
}

/** A client request on a connection of its own; resolves on the response head. */
function call(
  relay: Relay,
  options: { method?: string; path?: string; headers?: Record<string, string>; body?: string | Buffer } = {},
): { req: ClientRequest; response: Promise<IncomingMessage> } {
  const req = request(`${relay.url}${options.path ?? '/mcp'}`, {
    method: options.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...options.headers },
    agent: false,
  })
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve)
    req.on('error', reject)
  })
  response.catch(() => undefined) // a test that destroys the request looks at it itself
  req.end(options.body ?? '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}')
  return { req, response }
}

function readBody(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    res.on('data', (c: Buffer) => chunks.push(c))
    res.on('end', () => resolve(Buffer.concat(chunks)))
    res.on('error', reject)
  })
}

/** The first chunk of a response body. */
function firstChunk(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => res.once('data', (c: Buffer) => resolve(c.toString('utf8'))))
}

/** Rejects with `message` unless `work` settles within `ms` (a relay that holds something back would otherwise hang the test). */
function within<T>(ms: number, work: Promise<T>, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const expired = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)))
  return Promise.race([work, expired]).finally(() => clearTimeout(timer))
}

const codeOf = (err: unknown): unknown => (err as { code?: unknown } | undefined)?.code

describe('relaying an answer', () => {
  test('a sized body is relayed with its head in one write, held until the body arrives', async () => {
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { text: 'héllo' } }))
    const relay = await startRelay((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) })
      res.flushHeaders()
      // The body comes a moment after the head: a relay that sent the head at once would show it alone.
      setTimeout(() => res.end(body), 50)
    })
    const chunks: Buffer[] = []
    await new Promise<void>((resolve, reject) => {
      const socket = connect(relay.port, '127.0.0.1', () =>
        socket.write(
          'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}',
        ),
      )
      socket.on('data', (c: Buffer) => chunks.push(c))
      socket.on('end', resolve)
      socket.on('error', reject)
    })
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    const first = chunks[0].toString('latin1')
    expect(first).toMatch(/^HTTP\/1\.1 200 OK\r\n/)
    expect(first).toMatch(new RegExp(`\r\nx-wardline-request-id: ${ex.requestId}\r\n`, 'i'))
    expect(chunks[0].subarray(chunks[0].indexOf('\r\n\r\n') + 4)).toEqual(body) // head and whole body together
    expect(Buffer.concat(chunks)).toEqual(chunks[0])
    expect(ex.status).toBe(200)
    expect(ex.aborted).toBe(false)
    expect(ex.decision).toBeNull()
  })

  test('an SSE answer has its headers sent at once, before the first event, and then streams', async () => {
    const sendEvent = gate()
    const finish = gate()
    const relay = await startRelay(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      res.flushHeaders()
      await sendEvent.wait
      res.write('event: message\ndata: {"n":1}\n\n')
      await finish.wait
      res.end('data: {"n":2}\n\n')
    })
    const { response } = call(relay)
    const res = await within(3000, response, 'no response headers before the first event')
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/event-stream')
    const { ex, settled } = await relay.next()
    expect(res.headers['x-wardline-request-id']).toBe(ex.requestId)
    expect(ex.status).toBe(200)
    const first = firstChunk(res)
    sendEvent.open()
    expect(await first).toBe('event: message\ndata: {"n":1}\n\n')
    const rest = readBody(res)
    finish.open()
    expect((await rest).toString()).toBe('data: {"n":2}\n\n')
    expect(await settled).toEqual({ rejected: undefined, headersSentAtSettle: true })
    expect(ex.aborted).toBe(false)
  })

  test("the exchange's response headers replace the upstream's, and a CORS origin replaces the upstream's CORS headers", async () => {
    for (const sized of [true, false]) {
      const relay = await startRelay(
        (_req, res) => {
          res.setHeader('ratelimit', '"upstream";r=0;t=1')
          res.setHeader('access-control-allow-origin', '*')
          res.setHeader('access-control-allow-credentials', 'true')
          res.setHeader('vary', 'Accept-Encoding')
          res.setHeader('x-wardline-request-id', 'forged-by-upstream')
          res.setHeader('x-upstream', 'kept')
          if (sized) res.setHeader('content-length', '2')
          else res.setHeader('content-type', 'text/event-stream')
          res.end(sized ? '{}' : 'data: x\n\n')
        },
        {
          prepare: (ex) => {
            ex.responseHeaders = { ratelimit: '"identity";r=4;t=60', 'ratelimit-policy': '"identity";q=5;w=60' }
            ex.corsOrigin = 'https://app.example'
          },
        },
      )
      const res = await call(relay, { headers: { origin: 'https://app.example' } }).response
      await readBody(res)
      const { ex } = await relay.next()
      const label = sized ? 'sized' : 'streamed'
      expect({ label, headers: res.headers }).toEqual({
        label,
        headers: expect.objectContaining({
          ratelimit: '"identity";r=4;t=60',
          'ratelimit-policy': '"identity";q=5;w=60',
          'access-control-allow-origin': 'https://app.example',
          'access-control-expose-headers': expect.stringContaining('ratelimit') as unknown,
          'x-wardline-request-id': ex.requestId,
          'x-upstream': 'kept',
        }) as unknown,
      })
      expect(res.headers['access-control-allow-credentials']).toBeUndefined()
      expect(res.headers.vary?.split(/\s*,\s*/).sort()).toEqual(['Accept-Encoding', 'Origin'])
      expect(res.rawHeaders.filter((h) => h.toLowerCase() === 'ratelimit')).toHaveLength(1)
    }
  })

  test('informational (1xx) answers are not relayed: the client sees only the final answer', async () => {
    const relay = await startRelay((_req, res) => {
      res.writeProcessing()
      res.writeEarlyHints({ link: '</style.css>; rel=preload' })
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '2' })
      res.end('{}')
    })
    const { req, response } = call(relay)
    const informational: number[] = []
    req.on('information', (info: { statusCode: number }) => informational.push(info.statusCode))
    const res = await response
    expect(res.statusCode).toBe(200)
    expect((await readBody(res)).toString()).toBe('{}')
    expect(res.headers.link).toBeUndefined()
    expect(informational).toEqual([])
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    expect(ex.status).toBe(200)
  })

  test('the upstream gets the exact body, the principal as percent-encoded headers and the request id; client copies are dropped', async () => {
    const body = Buffer.from('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"é \\u2028"}}')
    const relay = await startRelay(
      (_req, res) => {
        res.writeHead(204).end()
      },
      {
        config: {},
        prepare: (ex) => {
          ex.principal = { identity: 'José 100%', tenant: 'acme' }
        },
      },
    )
    const res = await call(relay, {
      path: '/mcp?x=1',
      headers: { 'x-wardline-identity': 'forged', authorization: 'Bearer secret-token', 'x-custom': 'kept' },
      body,
    }).response
    await readBody(res)
    const { ex } = await relay.next()
    const seen = relay.upstream.seen[0]
    expect(seen.url).toBe('/mcp?x=1')
    expect(seen.body).toBe(body.toString('utf8'))
    expect(seen.headers).toMatchObject({
      'x-wardline-identity': 'Jos%C3%A9 100%25',
      'x-wardline-tenant': 'acme',
      'x-wardline-request-id': ex.requestId,
      'x-custom': 'kept',
    })
    expect(seen.headers.authorization).toBeUndefined()
    expect(seen.rawHeaders.filter((h) => h.toLowerCase() === 'x-wardline-identity')).toHaveLength(1)
  })
})

describe('an upstream that fails', () => {
  test('an unreachable upstream rejects WL_UPSTREAM_UNREACHABLE with nothing sent, so the caller answers 502', async () => {
    const relay = await startRelay(() => undefined, { upstreamUrl: `http://127.0.0.1:${await closedPort()}` })
    const res = await call(relay).response
    const { ex, settled } = await relay.next()
    const outcome = await settled
    expect(codeOf(outcome.rejected)).toBe('WL_UPSTREAM_UNREACHABLE')
    expect(outcome.headersSentAtSettle).toBe(false)
    expect(res.statusCode).toBe(502)
    expect((await readBody(res)).toString()).toBe('answered by the caller')
    expect(ex.aborted).toBe(false)
  })

  test('an upstream that drops the connection before its headers rejects WL_UPSTREAM_FAILED with nothing sent', async () => {
    const relay = await startRelay((req) => {
      req.socket.destroy()
    })
    const res = await call(relay).response
    const outcome = await (await relay.next()).settled
    expect(codeOf(outcome.rejected)).toBe('WL_UPSTREAM_FAILED')
    expect(outcome.headersSentAtSettle).toBe(false)
    expect(res.statusCode).toBe(502)
  })

  test('a sized answer that breaks off between head and body is still a clean failure: its head was held back', async () => {
    const relay = await startRelay((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
      res.flushHeaders()
      setImmediate(() => req.socket.destroy())
    })
    const res = await call(relay).response
    const outcome = await (await relay.next()).settled
    expect(codeOf(outcome.rejected)).toBe('WL_UPSTREAM_FAILED')
    expect(outcome.headersSentAtSettle).toBe(false)
    expect(res.statusCode).toBe(502)
    expect((await readBody(res)).toString()).toBe('answered by the caller')
  })

  test('an SSE stream that breaks off after its headers ends the client response and marks the exchange aborted', async () => {
    const die = gate()
    const relay = await startRelay(async (req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: {"n":1}\n\n')
      await die.wait
      req.socket.destroy()
    })
    const res = await call(relay).response
    expect(res.statusCode).toBe(200)
    expect(await firstChunk(res)).toBe('data: {"n":1}\n\n')
    const ended = new Promise<boolean>((resolve) => res.on('close', () => resolve(res.complete)))
    res.resume()
    die.open()
    expect(await ended).toBe(false) // the client sees a broken stream, not a clean end
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined() // too late for a 502: forward() resolves
    expect(ex.aborted).toBe(true)
    expect(ex.decision).toBe('error')
    expect(ex.reason).toMatch(/^upstream response broke off/)
    expect(ex.reasonCode).toBe('upstream.failed')
    expect(ex.status).toBe(200)
  })

  test('a stream that breaks off after its headers keeps a note made before it (a budget check that failed open)', async () => {
    const die = gate()
    const relay = await startRelay(
      async (req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('data: {"n":1}\n\n')
        await die.wait
        req.socket.destroy()
      },
      { prepare: (ex) => addNote(ex, NOTE.budgetFailOpen, 'budget check failed open: store down for this test') },
    )
    const res = await call(relay).response
    expect(await firstChunk(res)).toBe('data: {"n":1}\n\n')
    const ended = new Promise<void>((resolve) => res.on('close', () => resolve()))
    res.resume()
    die.open()
    await ended
    const { ex, settled } = await relay.next()
    await settled
    // The failure leads, its code is the failure's, and the earlier note is still there after it.
    expect(ex.reason).toMatch(/^upstream response broke off: .*; budget check failed open: store down for this test$/)
    expect(ex.reasonCode).toBe('upstream.failed')
    expect(hasNote(ex, NOTE.budgetFailOpen)).toBe(true)
  })
})

describe('upstream_timeout', () => {
  test('no response headers within the timeout rejects WL_UPSTREAM_TIMEOUT and aborts the upstream request', async () => {
    const relay = await startRelay(() => undefined, { config: { timeoutSeconds: 0.2 } })
    const started = performance.now()
    const res = await call(relay).response
    const outcome = await (await relay.next()).settled
    expect(codeOf(outcome.rejected)).toBe('WL_UPSTREAM_TIMEOUT')
    expect(outcome.headersSentAtSettle).toBe(false)
    expect(performance.now() - started).toBeGreaterThanOrEqual(190)
    expect(res.statusCode).toBe(502)
    expect(await relay.upstream.seen[0].closed).toEqual({ finished: false })
  })

  test('the timeout covers the headers only: a stream whose events come later lives on', async () => {
    const relay = await startRelay(
      (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.flushHeaders()
        setTimeout(() => res.end('data: late\n\n'), 400) // twice the timeout after the headers
      },
      { config: { timeoutSeconds: 0.2 } },
    )
    const res = await call(relay).response
    expect((await readBody(res)).toString()).toBe('data: late\n\n')
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    expect(ex.aborted).toBe(false)
  })

  test('requests sent at different times each time out at their own deadline, and one answered meanwhile never does', async () => {
    const relay = await startRelay(
      (req, res) => {
        if (req.headers['x-which'] === 'answered') res.writeHead(204).end()
      },
      { config: { timeoutSeconds: 0.3 } },
    )
    const startedFirst = performance.now()
    const first = call(relay, { headers: { 'x-which': 'first' } }).response
    await new Promise((resolve) => setTimeout(resolve, 150)) // the scenario: the second request starts half a timeout later
    const startedSecond = performance.now()
    const second = call(relay, { headers: { 'x-which': 'second' } }).response
    expect((await call(relay, { headers: { 'x-which': 'answered' } }).response).statusCode).toBe(204)
    expect((await first).statusCode).toBe(502)
    const firstDone = performance.now()
    expect((await second).statusCode).toBe(502)
    // Each waited its own 300 ms (timers never fire early), not the first one's.
    expect(firstDone - startedFirst).toBeGreaterThanOrEqual(290)
    expect(performance.now() - startedSecond).toBeGreaterThanOrEqual(290)
    const outcomes = await Promise.all([0, 1, 2].map(async () => (await relay.next()).settled))
    expect(outcomes.map((o) => codeOf(o.rejected) ?? 'served').sort()).toEqual(['WL_UPSTREAM_TIMEOUT', 'WL_UPSTREAM_TIMEOUT', 'served'])
  })

  test('a request queued behind a saturated pool times out too, and never reaches the upstream', async () => {
    const endFirst = gate()
    const relay = await startRelay(
      async (req, res) => {
        if (req.headers['x-which'] === 'first') {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.flushHeaders()
          await endFirst.wait
          res.end()
        } else res.writeHead(204).end()
      },
      { config: { timeoutSeconds: 0.3, connections: 1 } },
    )
    const first = await call(relay, { headers: { 'x-which': 'first' } }).response
    const queued = call(relay, { headers: { 'x-which': 'queued' } }).response
    await relay.next()
    const outcome = await (await relay.next()).settled
    expect(codeOf(outcome.rejected)).toBe('WL_UPSTREAM_TIMEOUT')
    expect((await queued).statusCode).toBe(502)
    endFirst.open()
    await readBody(first)
    // A request sent after the one that gave up: once it is answered, the queue is past the other.
    expect((await call(relay, { headers: { 'x-which': 'after' } }).response).statusCode).toBe(204)
    expect(relay.upstream.seen.map((s) => s.headers['x-which'])).toEqual(['first', 'after'])
  })
})

describe('the client', () => {
  test('a client that leaves before the upstream answers aborts the upstream request; the exchange says 499', async () => {
    const arrived = gate()
    const relay = await startRelay(() => arrived.open())
    const { req } = call(relay)
    await arrived.wait
    req.destroy()
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    expect(await relay.upstream.seen[0].closed).toEqual({ finished: false })
    expect(ex.aborted).toBe(true)
    expect(ex.status).toBe(499)
    expect(ex.reason).toBe('client closed the connection')
    expect(ex.reasonCode).toBe('client.closed')
  })

  test('a client that leaves mid-stream aborts the upstream request; the status already sent stays', async () => {
    const relay = await startRelay((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: {"n":1}\n\n')
    })
    const { req, response } = call(relay)
    const res = await response
    expect(await firstChunk(res)).toBe('data: {"n":1}\n\n')
    req.destroy()
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    expect(await relay.upstream.seen[0].closed).toEqual({ finished: false })
    expect(ex.aborted).toBe(true)
    expect(ex.status).toBe(200)
  })

  test('a client gone before forward() is called sends nothing upstream', async () => {
    const relay = await startRelay(
      (_req, res) => {
        res.writeHead(204).end()
      },
      // The first request: as if a stage (a budget check) was still running when the client left.
      { prepare: (ex) => (ex.requestId !== 'relay-1' ? undefined : new Promise<void>((resolve) => ex.res.once('close', () => resolve()))) },
    )
    await new Promise<void>((resolve, reject) => {
      const socket = connect(relay.port, '127.0.0.1', () => {
        socket.write('POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n', () => {
          socket.destroy()
          resolve()
        })
      })
      socket.on('error', reject)
    })
    const { ex, settled } = await relay.next()
    expect((await settled).rejected).toBeUndefined()
    expect(ex.aborted).toBe(true)
    expect(ex.status).toBe(499)
    // A request sent afterwards reaches the upstream first and alone.
    await readBody(await call(relay).response)
    expect(relay.upstream.seen).toHaveLength(1)
  })

  test('a slow client pauses the upstream (backpressure) instead of the relay buffering the answer', async () => {
    const total = 32 * 1024 * 1024
    const chunk = Buffer.alloc(64 * 1024, 'x')
    let sent = 0
    const relay = await startRelay(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) })
      while (sent < total) {
        sent += chunk.length
        if (!res.write(chunk)) await new Promise((resolve) => res.once('drain', resolve))
      }
      res.end()
    })
    const res = await call(relay).response
    res.pause()
    // Wait until the upstream has stopped being able to send (its count stands still for a while).
    let last = -1
    let stillFor = 0
    while (stillFor < 300) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      stillFor = sent === last ? stillFor + 50 : 0
      last = sent
    }
    // Only socket buffers on the way hold data: nowhere near the whole answer.
    expect(sent).toBeLessThan(total / 2)
    let received = 0
    res.on('data', (c: Buffer) => (received += c.length))
    res.resume()
    await new Promise((resolve) => res.on('end', resolve))
    expect(received).toBe(total)
    expect((await (await relay.next()).settled).rejected).toBeUndefined()
  })
})
