/**
 * Streaming, aborts and upstream failures, against raw upstreams that stall, stream and break off on cue.
 */
import type { IncomingMessage } from 'node:http'
import { type Harness, as, startHarness, toolCall } from '../helpers/harness'
import { open as send, readAll } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, closedPort, gate, startRawUpstream } from './raw-upstream'

/** Sends one request with node:http and resolves on the response headers. */
function nextChunk(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    res.once('data', (c: Buffer) => resolve(c.toString('utf8')))
    res.once('error', reject)
  })
}

const POST = { ...as('alice'), 'content-type': 'application/json', accept: 'application/json, text/event-stream' }

let upstream: RawUpstream | null = null
let h: Harness | null = null
afterEach(async () => {
  await h?.close()
  await upstream?.close()
  h = null
  upstream = null
})

describe('streaming responses', () => {
  test('an SSE event reaches the client while the upstream is still holding back the next one', async () => {
    const second = gate()
    upstream = await startRawUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n')
      await second.wait
      res.end('event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n')
    })
    h = await startHarness({ upstreamUrl: upstream.url })
    const res = await send(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo')) })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toBe('text/event-stream')
    expect(res.headers['content-encoding']).toBeUndefined()
    // The upstream has not written the result yet: it waits for `second`, which only this test opens.
    const first = await nextChunk(res)
    expect(first).toContain('"progress":1')
    expect(first).not.toContain('"result"')
    const rest = readAll(res)
    second.open()
    expect(await rest).toContain('"result":{}')
    expect((await h.audit()).map((e) => [e.method, e.decision, e.status])).toEqual([['tools/call', 'allow', 200]])
  })

  test('a quiet SSE stream outlives upstream_timeout_seconds: the timeout covers headers only', async () => {
    upstream = await startRawUpstream(async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      await new Promise((r) => setTimeout(r, 1_500)) // the upstream's own pace, not a test sleep
      res.end('event: message\ndata: late\n\n')
    })
    h = await startHarness({ upstreamUrl: upstream.url, config: { upstream_timeout_seconds: 1 } })
    const res = await send(`${h.url}/mcp`, { headers: { ...as('alice'), accept: 'text/event-stream' } })
    expect(res.statusCode).toBe(200)
    expect(await readAll(res)).toBe('event: message\ndata: late\n\n')
    expect((await h.audit()).map((e) => [e.method, e.decision, e.status, e.reason])).toEqual([['GET', 'passthrough', 200, undefined]])
  })
})

describe('a client that disconnects', () => {
  test('mid-stream, aborts the upstream request', async () => {
    upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': open\n\n') // and never ends
    })
    h = await startHarness({ upstreamUrl: upstream.url })
    const abort = new AbortController()
    const res = await send(`${h.url}/mcp`, { headers: { ...as('alice'), accept: 'text/event-stream' }, signal: abort.signal })
    expect(await nextChunk(res)).toBe(': open\n\n')
    res.on('error', () => undefined)
    abort.abort()
    expect(await upstream.seen[0].closed).toEqual({ finished: false })
    const [entry] = await waitForAudit(h, 1)
    expect(entry).toMatchObject({ method: 'GET', decision: 'passthrough', status: 200, reason: 'client closed the connection' })
  })

  test('before the upstream answers, aborts the upstream request and is audited as 499', async () => {
    const answered = gate()
    upstream = await startRawUpstream(() => {
      answered.open() // and never writes a response
    })
    h = await startHarness({ upstreamUrl: upstream.url })
    const abort = new AbortController()
    const pending = send(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo')), signal: abort.signal })
    pending.catch(() => undefined)
    await answered.wait
    abort.abort()
    expect(await upstream.seen[0].closed).toEqual({ finished: false })
    const [entry] = await waitForAudit(h, 1)
    expect(entry).toMatchObject({
      method: 'tools/call',
      tool: 'echo',
      decision: 'allow',
      status: 499,
      reason: 'client closed the connection',
    })
  })
})

describe('upstream failures', () => {
  test('an unreachable upstream is a 502 with a JSON-RPC body echoing the id', async () => {
    h = await startHarness({ upstreamUrl: `http://127.0.0.1:${await closedPort()}` })
    const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo', {}, 7)) })
    expect(res.status).toBe(502)
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(res.headers.get('mcp-session-id')).toBeNull()
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: { code: 502, message: 'Bad gateway: the MCP server could not be reached' },
    })
    const [entry] = await h.audit()
    expect(entry).toMatchObject({ method: 'tools/call', decision: 'error', status: 502 })
    // The code once, then what happened: "WL_UPSTREAM_UNREACHABLE: upstream unreachable: connect ECONNREFUSED …"
    expect(entry.reason).toMatch(/^WL_UPSTREAM_UNREACHABLE: upstream unreachable: .*ECONNREFUSED/)
    expect(entry.reason?.match(/WL_UPSTREAM/g)).toHaveLength(1)
  })

  test('an upstream that sends no headers within upstream_timeout_seconds is a 504', async () => {
    upstream = await startRawUpstream(() => undefined) // reads the request, never answers
    h = await startHarness({ upstreamUrl: upstream.url, config: { upstream_timeout_seconds: 0.5 } })
    const started = performance.now()
    const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo', {}, 'a')) })
    expect(res.status).toBe(504)
    expect(performance.now() - started).toBeGreaterThanOrEqual(450) // a lower bound: a loaded machine only makes it longer
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: 'a',
      error: { code: 504, message: 'Gateway timeout: the MCP server did not answer in time' },
    })
    const [entry] = await h.audit()
    expect(entry).toMatchObject({ decision: 'error', status: 504 })
    expect(entry.reason).toMatch(/^WL_UPSTREAM_TIMEOUT: /)
  })

  test('an upstream that drops the connection before answering is a 502', async () => {
    upstream = await startRawUpstream((req) => void req.socket.destroy())
    h = await startHarness({ upstreamUrl: upstream.url })
    const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo')) })
    expect(res.status).toBe(502)
    expect(((await res.json()) as { error: { code: number } }).error.code).toBe(502)
    const [entry] = await h.audit()
    expect(entry).toMatchObject({ decision: 'error', status: 502 })
  })

  test('an upstream that sends a sized head and dies before its body is a 502, not a 200 head and a reset', async () => {
    upstream = await startRawUpstream((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
      res.flushHeaders()
      setTimeout(() => req.socket.destroy(), 20) // the upstream's own pace: the head goes out first, the break a moment later
    })
    h = await startHarness({ upstreamUrl: upstream.url })
    const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: POST, body: JSON.stringify(toolCall('echo', {}, 4)) })
    expect(res.status).toBe(502)
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: 4, error: { code: 502 } })
    const [entry] = await h.audit()
    expect(entry).toMatchObject({ decision: 'error', status: 502 })
    expect(entry.reason).toMatch(/^WL_UPSTREAM_FAILED: /)
  })

  test('an upstream that breaks off mid-stream cuts the client connection and is audited as an error', async () => {
    upstream = await startRawUpstream((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: one\n\n', () => setTimeout(() => req.socket.destroy(), 20)) // as above: the event first, then the break
    })
    h = await startHarness({ upstreamUrl: upstream.url })
    const res = await send(`${h.url}/mcp`, { headers: { ...as('alice'), accept: 'text/event-stream' } })
    expect(res.statusCode).toBe(200)
    await expect(readAll(res)).rejects.toThrow(/aborted/)
    const [entry] = await waitForAudit(h, 1)
    expect(entry).toMatchObject({ method: 'GET', decision: 'error', status: 200 })
    expect(entry.reason).toMatch(/^upstream response broke off/)
  })
})

/** The audit entry of a request the client abandoned is written when the gateway notices; wait for it. */
function waitForAudit(harness: Harness, count: number): Promise<Awaited<ReturnType<Harness['audit']>>> {
  return waitFor(
    async () => {
      const entries = await harness.audit()
      return entries.length >= count && entries
    },
    { what: `${count} audit entries` },
  )
}
