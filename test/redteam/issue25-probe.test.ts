/**
 * Red team (upstream health probe): a hostile upstream must not hold one probe past its
 * timeout, nor leave a socket or a timer behind, and a redirect must not take the probe elsewhere.
 * probeOnce against raw TCP servers on port 0 that misbehave on purpose, read from the server side.
 */
import { type AddressInfo, type Server, type Socket, createServer } from 'node:net'
import type { HealthCheckConfig } from '../../src/config/types'
import { probeOnce } from '../../src/upstream/probe'
import { waitFor } from '../helpers/wait'

const CONFIG: HealthCheckConfig = { url: null, method: 'GET', intervalSeconds: 10, timeoutSeconds: 0.3, affectsReadiness: true }

interface Hostile {
  readonly url: string
  readonly server: Server
  readonly sockets: Set<Socket>
  /** Bytes received from the probe, per connection. */
  readonly requests: string[]
  close(): Promise<void>
}

async function hostile(onConnection: (socket: Socket) => void): Promise<Hostile> {
  const sockets = new Set<Socket>()
  const requests: string[] = []
  const server = createServer((socket) => {
    sockets.add(socket)
    const at = requests.push('') - 1
    socket.on('data', (chunk: Buffer) => (requests[at] += chunk.toString('latin1')))
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => undefined)
    onConnection(socket)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/`,
    server,
    sockets,
    requests,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const open: Hostile[] = []
afterEach(async () => {
  for (const h of open.splice(0)) await h.close()
})

async function start(onConnection: (socket: Socket) => void): Promise<Hostile> {
  const h = await hostile(onConnection)
  open.push(h)
  return h
}

function drip(socket: Socket, text: string, everyMs: number): void {
  const timer = setInterval(() => {
    if (socket.destroyed) return clearInterval(timer)
    socket.write(text)
  }, everyMs)
  socket.on('close', () => clearInterval(timer))
}

test('a head that drips a header line every 20 ms forever is down after the timeout, and its connection is closed', async () => {
  const h = await start((socket) => {
    socket.write('HTTP/1.1 200 OK\r\n')
    drip(socket, 'X-Slow: a\r\n', 20)
  })
  const t0 = performance.now()
  const r = await probeOnce(new URL(h.url), CONFIG)
  expect(performance.now() - t0).toBeLessThan(1000)
  expect(r).toMatchObject({ up: false, cause: 'timeout after 0.3 s' })
  await waitFor(() => h.sockets.size === 0, { what: 'the probe connection to close', timeoutMs: 2000 })
})

test('a head of 1 MB of headers is refused well within the timeout (undici caps the head), and its connection is closed', async () => {
  const h = await start((socket) => {
    socket.write('HTTP/1.1 200 OK\r\n')
    for (let i = 0; i < 1024; i++) socket.write(`X-Big-${i}: ${'a'.repeat(1000)}\r\n`)
  })
  const r = await probeOnce(new URL(h.url), { ...CONFIG, timeoutSeconds: 5 })
  expect(r.up).toBe(false)
  expect(r.durationSeconds).toBeLessThan(2)
  await waitFor(() => h.sockets.size === 0, { what: 'the probe connection to close', timeoutMs: 2000 })
})

test('an https upstream that accepts the connection and never answers the TLS handshake is down after the timeout, socket closed', async () => {
  const h = await start(() => undefined)
  const r = await probeOnce(new URL(h.url.replace('http:', 'https:')), CONFIG)
  expect(r).toMatchObject({ up: false, cause: 'timeout after 0.3 s' })
  await waitFor(() => h.sockets.size === 0, { what: 'the probe connection to close', timeoutMs: 2000 })
})

test('a redirect is not followed: the probe never reaches the other server, and the 3xx counts as an answer', async () => {
  const elsewhere = await start((socket) => socket.end('HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n'))
  const h = await start((socket) =>
    socket.once('data', () => socket.write(`HTTP/1.1 302 Found\r\nlocation: ${elsewhere.url}x\r\ncontent-length: 0\r\n\r\n`)),
  )
  const r = await probeOnce(new URL(h.url), CONFIG)
  expect(r).toMatchObject({ up: true, status: 302 })
  expect(elsewhere.requests).toEqual([])
})

test('endless 1xx interim answers cannot hold the probe past its timeout', async () => {
  const h = await start((socket) => socket.once('data', () => drip(socket, 'HTTP/1.1 102 Processing\r\n\r\n', 20)))
  const t0 = performance.now()
  const r = await probeOnce(new URL(h.url), CONFIG)
  expect(performance.now() - t0).toBeLessThan(1000)
  expect(r.up).toBe(false)
  await waitFor(() => h.sockets.size === 0, { what: 'the probe connection to close', timeoutMs: 2000 })
})

test('the query of the probed URL (it may hold a key) does not appear in a failure cause', async () => {
  const h = await start((socket) => socket.once('data', () => socket.end('not http at all\r\n\r\n')))
  const r = await probeOnce(new URL(`${h.url}health?key=s3cr3t-probe-key`), CONFIG)
  expect(r.up).toBe(false)
  expect(r.cause).not.toContain('s3cr3t')
  expect(h.requests[0]).toContain('key=s3cr3t-probe-key') // it is sent, only never shown
})

test('a probe leaves no timer or socket handle behind once it settled', async () => {
  const h = await start((socket) => drip(socket, '', 1000))
  const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length
  for (let i = 0; i < 5; i++) await probeOnce(new URL(h.url), { ...CONFIG, timeoutSeconds: 0.05 })
  await waitFor(() => h.sockets.size === 0, { what: 'the probe connection to close', timeoutMs: 2000 })
  await new Promise((resolve) => setImmediate(resolve))
  const after = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length
  expect(after).toBeLessThanOrEqual(before)
})
