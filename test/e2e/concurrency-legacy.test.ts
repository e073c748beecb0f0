/**
 * The concurrency cap on the legacy HTTP+SSE transport (MCP 2024-11-05): the upstream answers a POST
 * /messages?sessionId=… with 202 at once and sends the call's answer on the session's /sse stream, so
 * the POST's slot stays owed until that answer passes, the stream ends, or upstream_timeout_seconds.
 * (test/redteam/issue24-cap.test.ts shows the calls do not run past the cap; these show every owed
 * slot is given back.)
 */
import { type IncomingMessage, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { type Harness, as, rpc, startHarness, toolCall } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'

let h: Harness | undefined
const streams: AbortController[] = []
afterEach(async () => {
  for (const s of streams.splice(0)) s.abort()
  await h?.close()
  h = undefined
})

interface LegacySession {
  readonly text: () => string
  readonly post: (body: unknown) => Promise<number>
  readonly close: () => void
}

/** Opens alice's /sse stream, initializes its session and returns a way to POST into it. */
async function legacySession(harness: Harness): Promise<LegacySession> {
  const abort = new AbortController()
  streams.push(abort)
  const sse: IncomingMessage = await open(`${harness.url}/sse`, {
    headers: { ...as('alice'), accept: 'text/event-stream' },
    signal: abort.signal,
  })
  expect(sse.statusCode).toBe(200)
  let text = ''
  sse.on('data', (c: Buffer) => (text += c.toString('utf8')))
  sse.on('error', () => undefined)
  await waitFor(() => /sessionId=/.test(text), { what: 'the endpoint event' })
  const endpoint = /data: (\/messages\?sessionId=[^\r\n]+)/.exec(text)![1]
  const post = (body: unknown): Promise<number> =>
    send(`${harness.url}${endpoint}`, 'POST', { ...as('alice'), 'content-type': 'application/json' }, JSON.stringify(body)).then(
      (r) => r.status,
    )
  expect(
    await post({
      jsonrpc: '2.0',
      id: 'init',
      method: 'initialize',
      params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'legacy', version: '1' } },
    }),
  ).toBe(202)
  await waitFor(() => text.includes('"id":"init"'), { what: 'the initialize answer' })
  expect(await post({ jsonrpc: '2.0', method: 'notifications/initialized' })).toBe(202)
  return { text: () => text, post, close: () => abort.abort() }
}

test('a legacy call holds its slot until its answer passes on /sse, then gives it back', async () => {
  h = await startHarness({ config: { max_concurrent_per_identity: 2 } })
  const session = await legacySession(h)
  // Quick calls, whose answers may reach /sse before their POST's 202 ends: none leaves a slot behind.
  for (let i = 1; i <= 5; i++) {
    expect(await session.post(rpc('ping', undefined, `p${i}`))).toBe(202)
    await waitFor(() => session.text().includes(`"id":"p${i}"`), { what: `the answer to ping p${i}` })
  }
  // A slow call (ids compared as any server would: "7" and 7 are one id) holds alice's second slot.
  expect(await session.post(toolCall('count_slowly', { n: 1, delay_ms: 1500 }, '7'))).toBe(202)
  expect(await session.post(rpc('ping', undefined, 'blocked'))).toBe(429)
  await waitFor(() => session.text().includes('counted to 1'), { what: 'the slow call answered', timeoutMs: 20_000 })
  await waitFor(async () => (await session.post(rpc('ping', undefined, 'after'))) === 202, { what: 'a slot given back' })
}, 30_000)

test('closing the /sse stream gives back every slot its session owes', async () => {
  h = await startHarness({ config: { max_concurrent_per_identity: 2 } })
  const first = await legacySession(h)
  expect(await first.post(toolCall('count_slowly', { n: 2, delay_ms: 5000 }, 1))).toBe(202)
  expect(await first.post(rpc('ping', undefined, 2))).toBe(429)
  first.close()
  // Both slots (the stream's and the one its call owed) come back with the stream's end: a new
  // session (a stream and a call) fits under the cap long before the first call would end.
  const harness = h
  const second = await waitFor(
    async () => {
      try {
        return await legacySession(harness)
      } catch {
        return null
      }
    },
    { what: 'a new session opened', intervalMs: 100 },
  )
  expect(await second.post(toolCall('count_slowly', { n: 1, delay_ms: 100 }, 1))).toBe(202)
}, 30_000)

test('an answer that never comes: the slot is given back after upstream_timeout_seconds', async () => {
  h = await startHarness({ config: { max_concurrent_per_identity: 2, upstream_timeout_seconds: 1 } })
  const session = await legacySession(h)
  expect(await session.post(toolCall('count_slowly', { n: 4, delay_ms: 5000 }, 1))).toBe(202)
  expect(await session.post(rpc('ping', undefined, 2))).toBe(429)
  // Long before the call's 20 s: the owed slot expired with upstream_timeout_seconds.
  await waitFor(async () => (await session.post(rpc('ping', undefined, 3))) === 202, {
    what: 'the owed slot expired',
    intervalMs: 200,
    timeoutMs: 15_000,
  })
  expect(session.text()).not.toContain('counted to 4')
}, 30_000)

test('a legacy session named by session_id (the Python SDK parameter) owes its slots the same way', async () => {
  // The Python SDK's legacy transport, as the wire shows it: endpoint /messages/?session_id=…, every
  // POST answered 202, its answer sent on the stream (a `slow` call after 1.5 s, anything else at once).
  let stream: ServerResponse | null = null
  const upstream = createServer((req, res) => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: endpoint\ndata: /messages/?session_id=abc123\n\n')
      stream = res
      return
    }
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString('utf8')))
    req.on('end', () => {
      res.writeHead(202).end('Accepted')
      const message = JSON.parse(body) as { id?: unknown; method: string }
      if (message.id === undefined) return
      const answer = `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: message.id, result: {} })}\n\n`
      setTimeout(() => stream?.write(answer), message.method === 'slow' ? 1500 : 0) // the upstream's own pace for a slow tool
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  try {
    h = await startHarness({
      upstreamUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
      config: { max_concurrent_per_identity: 2 },
    })
    const abort = new AbortController()
    streams.push(abort)
    const sse = await open(`${h.url}/sse`, { headers: { ...as('alice'), accept: 'text/event-stream' }, signal: abort.signal })
    let text = ''
    sse.on('data', (c: Buffer) => (text += c.toString('utf8')))
    sse.on('error', () => undefined)
    await waitFor(() => text.includes('session_id='), { what: 'the endpoint event' })
    const harness = h
    const post = (body: unknown): Promise<number> =>
      send(
        `${harness.url}/messages/?session_id=abc123`,
        'POST',
        { ...as('alice'), 'content-type': 'application/json' },
        JSON.stringify(body),
      ).then((r) => r.status)
    expect(await post(rpc('slow', undefined, 1))).toBe(202)
    expect(await post(rpc('ping', undefined, 2))).toBe(429)
    await waitFor(() => text.includes('"id":1'), { what: 'the slow answer' })
    await waitFor(async () => (await post(rpc('ping', undefined, 3))) === 202, { what: 'a slot given back' })
  } finally {
    upstream.closeAllConnections()
    await new Promise<void>((resolve) => upstream.close(() => resolve()))
  }
}, 30_000)
