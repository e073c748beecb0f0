/**
 * max_concurrent_per_identity end to end: real HTTP on port 0, an upstream that holds
 * the requests of one caller until the test lets them go, the audit trail and /metrics read back.
 */
import type { ServerResponse } from 'node:http'
import { type Socket, connect } from 'node:net'
import type { AuditEntry } from '../../src/audit/entry'
import { PENDING_BODIES } from '../../src/concurrency/stage'
import { type Harness, MCP_HEADERS, as, configFrom, metricSample, rpc, startHarness } from '../helpers/harness'
import { open as send, readAll } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, startRawUpstream } from './raw-upstream'

const LIMIT_REASON = 'concurrency limit: 3 requests in flight for this identity (max_concurrent_per_identity)'

let upstream: RawUpstream
let h: Harness
/** Responses the upstream holds: alice@acme's pings and streams, never answered until the test says so. */
const held: ServerResponse[] = []

function answerHeld(): void {
  for (const res of held.splice(0)) {
    if (res.headersSent) res.end()
    else res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{}}')
  }
}

beforeAll(async () => {
  upstream = await startRawUpstream((req, res, seen) => {
    const alice = req.headers['x-wardline-identity'] === 'alice' && req.headers['x-wardline-tenant'] === 'acme'
    const holding = alice && (req.method === 'GET' || seen.body.includes('"method":"ping"') || seen.body.includes('"name":"hold"'))
    if (req.method === 'GET') {
      // A standalone SSE stream: open, one comment, then quiet for as long as the client listens.
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': open\n\n')
      if (holding) held.push(res)
      else res.end()
      return
    }
    if (holding) held.push(res)
    else res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{}}')
  })
  h = await startHarness({ upstreamUrl: upstream.url, config: { max_concurrent_per_identity: 3 } })
})

afterAll(async () => {
  answerHeld()
  await h.close()
  await upstream.close()
})

afterEach(async () => {
  answerHeld()
  // Every slot is back once every request has its audit record: wait for alice to be admitted again.
  await waitFor(async () => (await listTools('alice')).status === 200, { what: 'alice admitted again' })
})

/** A request the upstream answers at once, whoever sends it. */
function listTools(identity: string): Promise<Response> {
  return fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as(identity) }, body: JSON.stringify(rpc('tools/list')) })
}

function ping(identity: string, tenant = 'acme', signal?: AbortSignal): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity, tenant) },
    body: JSON.stringify(rpc('ping')),
    signal,
  })
}

/** Starts `n` pings of alice@acme that the upstream holds, and waits until the upstream has them all. */
async function hang(n: number): Promise<{ controller: AbortController; done: Array<Promise<unknown>> }> {
  const controller = new AbortController()
  const before = held.length
  const done = Array.from({ length: n }, () =>
    ping('alice', 'acme', controller.signal).then(
      (r) => r.arrayBuffer(),
      () => undefined,
    ),
  )
  await waitFor(() => held.length === before + n, { what: `${n} requests held upstream` })
  return { controller, done }
}

async function entriesFor(requestId: string | null): Promise<AuditEntry[]> {
  return (await h.audit()).filter((e) => e.request_id === requestId)
}

function refusedCount(): Promise<number> {
  return metricSample(h.url, 'wardline_concurrency_refused_total')
}

test('the 4th request of an identity with 3 in flight gets 429, Retry-After: 1, no-store, a JSON-RPC body, one audit entry and a count', async () => {
  const refusedBefore = await refusedCount()
  const { controller, done } = await hang(3)
  const seen = upstream.seen.length
  const res = await ping('alice')
  expect(res.status).toBe(429)
  expect(res.headers.get('retry-after')).toBe('1')
  expect(res.headers.get('cache-control')).toBe('no-store')
  expect(res.headers.get('content-type')).toMatch(/^application\/json/)
  expect(res.headers.get('mcp-session-id')).toBeNull()
  const body = await res.json()
  expect(body).toMatchObject({ jsonrpc: '2.0', error: { code: 429, data: { retry_after_seconds: 1 } } })
  expect(JSON.stringify(body)).not.toContain('max_concurrent') // operators' detail stays in the audit reason
  expect(upstream.seen.length).toBe(seen)
  const entries = await entriesFor(res.headers.get('x-wardline-request-id'))
  expect(entries).toHaveLength(1)
  expect(entries[0]).toMatchObject({ identity: 'alice', tenant: 'acme', decision: 'throttled', status: 429, reason: LIMIT_REASON })
  expect(await refusedCount()).toBe(refusedBefore + 1)
  controller.abort()
  await Promise.all(done)
})

test('another identity of the tenant, and the same identity in another tenant, are not affected', async () => {
  const { controller, done } = await hang(3)
  expect((await ping('alice')).status).toBe(429)
  expect((await ping('bob')).status).toBe(200)
  expect((await ping('alice', 'other')).status).toBe(200)
  controller.abort()
  await Promise.all(done)
})

test('once her requests end, whether the client gave up or the upstream answered, she can go again', async () => {
  // The client gives up: the gateway aborts the upstream requests, audits them and frees the slots.
  const first = await hang(3)
  expect((await ping('alice')).status).toBe(429)
  first.controller.abort()
  await Promise.all(first.done)
  await waitFor(async () => (await listTools('alice')).status === 200, { what: 'slots freed by the aborts' })
  const second = await hang(3) // admitted again, and held again
  expect((await ping('alice')).status).toBe(429)
  // The upstream answers: each request ends with its 200 and its slot.
  answerHeld()
  await Promise.all(second.done)
  await waitFor(async () => (await listTools('alice')).status === 200, { what: 'slots freed by the answers' })
  const again = await hang(1)
  again.controller.abort()
  await Promise.all(again.done)
})

test('GET SSE streams hold a slot for as long as they are open, and go past the cap up to twice it', async () => {
  const controller = new AbortController()
  const open = (): ReturnType<typeof send> =>
    send(`${h.url}/mcp`, { headers: { accept: 'text/event-stream', ...as('alice') }, signal: controller.signal })
  const streams = await Promise.all([1, 2, 3].map(open))
  expect(streams.map((s) => s.statusCode)).toEqual([200, 200, 200])
  expect((await ping('alice')).status).toBe(429) // streams and POSTs share the identity's slots
  // The stream a server's sampling requests and notifications arrive on: not refused at the cap (the
  // SDK client never retries a refused one), but bounded, as a listen stream is.
  const past = await Promise.all([1, 2, 3].map(open))
  expect(past.map((s) => s.statusCode)).toEqual([200, 200, 200])
  const refused = await send(`${h.url}/mcp`, { headers: { accept: 'text/event-stream', ...as('alice') } })
  expect(refused.statusCode).toBe(429)
  expect(JSON.parse(await readAll(refused))).toMatchObject({ error: { code: 429 } })
  controller.abort()
  for (const s of [...streams, ...past]) s.resume()
})

test('a request refused by auth holds no slot and is not counted against anyone', async () => {
  const { controller, done } = await hang(3)
  const anonymous = await fetch(`${h.url}/mcp`, { method: 'POST', headers: MCP_HEADERS, body: JSON.stringify(rpc('ping')) })
  expect(anonymous.status).toBe(401)
  expect((await ping('alice')).status).toBe(429)
  controller.abort()
  await Promise.all(done)
})

function initialize(identity: string, signal?: AbortSignal, clientName = 't'): Promise<Response> {
  const body = JSON.stringify(
    rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: clientName, version: '1' } }),
  )
  return fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as(identity) }, body, signal })
}

test('a lone initialize is not refused at the cap (principles.md: a 4xx there pushes clients onto the legacy transport)', async () => {
  const { controller, done } = await hang(3)
  expect((await initialize('alice')).status).toBe(200)
  expect((await ping('alice')).status).toBe(429)
  controller.abort()
  await Promise.all(done)
})

test('an initialize inside a batch carries nothing past the cap', async () => {
  const { controller, done } = await hang(3)
  const seen = upstream.seen.length
  const batch = [{ jsonrpc: '2.0', method: 'initialize' }, rpc('tools/list', undefined, 2)]
  const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as('alice') }, body: JSON.stringify(batch) })
  expect(res.status).toBe(429)
  expect(upstream.seen.length).toBe(seen)
  controller.abort()
  await Promise.all(done)
})

test('initializes the upstream never answers stop at twice the cap', async () => {
  const { controller, done } = await hang(3)
  const before = held.length
  const inits = Array.from({ length: 3 }, () =>
    initialize('alice', controller.signal, 'hold').then(
      (r) => r.arrayBuffer(),
      () => undefined,
    ),
  )
  await waitFor(() => held.length === before + 3, { what: 'three initializes held upstream' })
  expect((await initialize('alice', undefined, 'hold')).status).toBe(429)
  controller.abort()
  await Promise.all([...done, ...inits])
})

test('a reload keeps the requests in flight counted', async () => {
  const { controller, done } = await hang(3)
  h.gateway.reload(configFrom(h.tree))
  expect((await ping('alice')).status).toBe(429)
  controller.abort()
  await Promise.all(done)
})

test('requests refused after the slot was taken (a body that is not JSON-RPC) give it back', async () => {
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as('alice') }, body: '{"jsonrpc":' })
    expect(res.status).toBe(400)
  }
  const { controller, done } = await hang(3) // all three admitted: none of the five kept a slot
  controller.abort()
  await Promise.all(done)
})

/**
 * A POST of alice's that announces `bytes` of body and sends only its first KiB, then stalls: the gateway buffers whatever body it starts reading until request_timeout_seconds.
 */
function halfSent(bytes: number): { socket: Socket; status: Promise<number> } {
  const { port } = new URL(h.url)
  const socket = connect(Number(port), '127.0.0.1')
  socket.on('error', () => undefined)
  socket.write(
    'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
      `X-Wardline-Identity: alice\r\nX-Wardline-Tenant: acme\r\nContent-Length: ${bytes}\r\n\r\n`,
  )
  socket.write(Buffer.alloc(1024, 0x20))
  const status = new Promise<number>((resolve) => {
    socket.once('data', (chunk: Buffer) => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(chunk.toString('latin1'))?.[1] ?? -1)))
    socket.once('close', () => resolve(0))
  })
  return { socket, status }
}

test('the slot is taken before the body is read: past the cap and its few pending bodies, half-sent bodies get 429 at once', async () => {
  const audited = (await h.audit()).length
  const extra = 5
  const attempts = Array.from({ length: 3 + PENDING_BODIES + extra }, () => halfSent(1024 * 1024))
  const answered: number[] = []
  for (const a of attempts) void a.status.then((s) => answered.push(s))
  await waitFor(() => answered.length >= extra, { what: `${extra} half-sent bodies answered` })
  // One more, sent after all of them: answered once the gateway has seen every earlier one.
  const last = halfSent(1024 * 1024)
  expect(await last.status).toBe(429)
  expect(answered).toEqual(Array.from({ length: extra }, () => 429)) // the cap and the pending slots still wait for their bodies
  for (const a of [...attempts, last]) a.socket.destroy()
  // Every one of them is audited once: the refused as throttled, the rest when their client left.
  const entries = await waitFor(
    async () => {
      const mine = (await h.audit()).slice(audited).filter((e) => e.identity === 'alice' && e.method === 'POST')
      return mine.length === attempts.length + 1 && mine
    },
    { what: 'every half-sent request audited' },
  )
  expect(entries.filter((e) => e.decision === 'throttled').map((e) => [e.status, e.reason])).toEqual(
    Array.from({ length: extra + 1 }, () => [429, LIMIT_REASON]),
  )
})
