/**
 * Audit evasion by volume: refused batches must not flood the audit queue, and no
 * call may run upstream unless its audit entry is sure to be kept. A real gateway, a raw upstream
 * that records what it executed, and a real JSONL sink (a file, or a FIFO the test stops reading).
 */
import { execFileSync } from 'node:child_process'
import { closeSync, constants, openSync, readSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { type Harness, MCP_HEADERS, as, rpc, startHarness, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, startRawUpstream } from './raw-upstream'

/** Answers every JSON-RPC request (or batch) with an empty result, like an MCP server would. */
async function answeringUpstream(): Promise<RawUpstream> {
  return startRawUpstream((_req, res, seen) => {
    const body = JSON.parse(seen.body || 'null') as unknown
    const answer = (m: { id?: unknown }): unknown => ({ jsonrpc: '2.0', id: m.id ?? null, result: {} })
    const reply = Array.isArray(body)
      ? body.filter((m: { id?: unknown }) => m.id !== undefined).map(answer)
      : answer(body as { id?: unknown })
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(reply))
  })
}

async function post(h: Harness, body: unknown, identity = 'alice'): Promise<Response> {
  return fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...as(identity), ...MCP_HEADERS }, body: JSON.stringify(body) })
}

async function metric(h: Harness, name: string): Promise<number> {
  const text = await (await fetch(`${h.url}/metrics`)).text()
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)
  return m === null ? 0 : Number(m[1])
}

const POLICY = {
  default: 'allow',
  rules: [{ identity: 'guest', method: 'prompts/*', tool: '*', effect: 'deny' }], // rule 0
}

describe('audit entries per request', () => {
  let h: Harness
  let upstream: RawUpstream
  beforeAll(async () => {
    upstream = await answeringUpstream()
    h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
  })
  afterAll(async () => {
    await h.close()
    await upstream.close()
  })

  test('a denied 100-element batch writes exactly one audit entry, under its plain request id', async () => {
    const before = (await h.audit()).length
    const batch = Array.from({ length: 100 }, (_, i) => rpc('prompts/list', {}, i))
    const res = await post(h, batch, 'guest')
    expect(res.status).toBe(403)
    await res.arrayBuffer()
    const entries = (await h.audit()).slice(before)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({
      request_id: res.headers.get('x-wardline-request-id'),
      identity: 'guest',
      method: 'prompts/list',
      tool: '',
      decision: 'deny',
      status: 403,
      reason: 'batch refused: element 0 denied by rule 0',
    })
    expect(upstream.seen).toHaveLength(0)
  })

  test('a refused mixed batch names its distinct methods in order and the first refused target', async () => {
    const before = (await h.audit()).length
    const batch = [
      rpc('tools/list', {}, 1),
      toolCall('echo', { text: 'a' }, 2),
      rpc('prompts/get', { name: 'greeting' }, 3),
      rpc('tools/list', {}, 4),
      rpc('prompts/list', {}, 5),
    ]
    const res = await post(h, batch, 'guest')
    expect(res.status).toBe(403)
    await res.arrayBuffer()
    const entries = (await h.audit()).slice(before)
    expect(entries.map((e) => [e.request_id, e.method, e.tool, e.decision, e.reason])).toEqual([
      [
        res.headers.get('x-wardline-request-id'),
        'tools/list,tools/call,prompts/get,prompts/list',
        'greeting',
        'deny',
        'batch refused: element 2 denied by rule 0',
      ],
    ])
  })

  test('a forwarded batch still writes one entry per gated element plus one for the rest', async () => {
    const before = (await h.audit()).length
    const batch = [
      toolCall('echo', { text: 'a' }, 1),
      rpc('tools/list', {}, 2),
      toolCall('add', { a: 1, b: 2 }, 3),
      { jsonrpc: '2.0', method: 'notifications/initialized' },
    ]
    const res = await post(h, batch)
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    const id = res.headers.get('x-wardline-request-id')
    const entries = (await h.audit()).slice(before)
    expect(entries.map((e) => [e.request_id, e.method, e.tool, e.decision])).toEqual([
      [`${id}/0`, 'tools/call', 'echo', 'allow'],
      [`${id}/2`, 'tools/call', 'add', 'allow'],
      [`${id}/rest`, 'tools/list,notifications/initialized', '', 'passthrough'],
    ])
  })
})

/**
 * The sink is a FIFO: the gateway's audit "file" is a pipe whose reader (this test) stops reading,
 * so the sink's write really blocks, as on a stalled disk or a stdout nobody reads. The test fills
 * the pipe first (with empty lines, which JSONL readers skip) so the very first entry blocks.
 */
describe('audit backpressure', () => {
  let h: Harness
  let upstream: RawUpstream
  let reader = -1
  let text = ''
  const fifo = join(tempDir(), 'audit.fifo')

  beforeAll(async () => {
    execFileSync('mkfifo', [fifo])
    reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
    upstream = await answeringUpstream()
    h = await startHarness({ upstreamUrl: upstream.url, config: { audit: { output: fifo, max_queue_entries: 100 } } })
    fillPipe(fifo)
  })
  afterAll(async () => {
    readAvailable()
    await h.close()
    await upstream.close()
    closeSync(reader)
  })

  function readAvailable(): void {
    const buf = Buffer.alloc(1 << 16)
    for (;;) {
      let n: number
      try {
        n = readSync(reader, buf)
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return
        throw err
      }
      if (n === 0) return
      text += buf.toString('utf8', 0, n)
    }
  }

  function entries(): AuditEntry[] {
    return text
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as AuditEntry)
  }

  test('with the sink stalled, new calls get 503 and every call the upstream ran is in the trail once it recovers', async () => {
    // The first entry is taken by the sink's (now blocked) write; 99 more fill the queue to 99.
    const forwarded: string[] = []
    const call = async (i: number): Promise<void> => {
      const res = await post(h, toolCall('echo', { text: String(i) }, i))
      expect(res.status).toBe(200)
      await res.arrayBuffer()
      forwarded.push(res.headers.get('x-wardline-request-id') as string)
    }
    await call(0)
    await waitFor(async () => (await metric(h, 'wardline_audit_queue_entries')) === 0, {
      what: 'the first entry to reach the blocked write',
    })
    for (let i = 1; i < 100; i++) await call(i)
    await waitFor(async () => (await metric(h, 'wardline_audit_queue_entries')) === 99, { what: '99 queued entries' })

    // A batch needing 2 slots does not fit beside 99: 503, but its own single entry has room.
    const batch = await post(h, [toolCall('echo', { text: 'b' }, 'b1'), toolCall('echo', { text: 'b' }, 'b2')])
    expect(batch.status).toBe(503)
    expect(batch.headers.get('retry-after')).toBe('1')
    expect(await batch.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: 503, message: 'Service unavailable', data: { retry_after_seconds: 1 } },
    })
    const batchId = batch.headers.get('x-wardline-request-id')

    // The queue is now full: the next call gets 503 too, and its entry (it ran nothing) is dropped and counted.
    const single = await post(h, toolCall('echo', { text: 'late' }, 'late'))
    expect(single.status).toBe(503)
    expect(single.headers.get('retry-after')).toBe('1')
    expect(await single.json()).toMatchObject({ id: 'late', error: { code: 503 } })
    const singleId = single.headers.get('x-wardline-request-id')
    expect(await metric(h, 'wardline_audit_backpressure_total')).toBe(2)
    expect(await metric(h, 'wardline_audit_dropped_total')).toBe(1)

    // The upstream ran exactly the 100 admitted calls.
    const ran = upstream.seen.map((s) => s.headers['x-wardline-request-id'])
    expect(ran).toEqual(forwarded)

    // The reader comes back: everything accepted is written, nothing the upstream ran is missing.
    await waitFor(
      () => {
        readAvailable()
        return entries().length >= 101
      },
      { what: 'every accepted entry' },
    )
    await h.gateway.audit.flush()
    readAvailable()
    const trail = entries()
    expect(trail).toHaveLength(101)
    const byId = new Map(trail.map((e) => [e.request_id, e]))
    for (const id of forwarded) expect(byId.get(id)).toMatchObject({ method: 'tools/call', tool: 'echo', decision: 'allow', status: 200 })
    expect(byId.get(batchId as string)).toMatchObject({
      method: 'tools/call',
      tool: 'echo',
      decision: 'error',
      status: 503,
      reason: expect.stringMatching(/^WL_AUDIT_BACKPRESSURE: /) as unknown,
    })
    expect(byId.has(singleId as string)).toBe(false)
    expect(await metric(h, 'wardline_audit_dropped_total')).toBe(1)

    // With room again, calls are forwarded.
    const after = await post(h, toolCall('echo', { text: 'again' }, 'again'))
    expect(after.status).toBe(200)
    await after.arrayBuffer()
  })
})

/** Fills a FIFO's buffer to the last byte with newlines (non-blocking writes until EAGAIN). */
function fillPipe(path: string): void {
  const fd = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK)
  try {
    for (const chunk of [Buffer.alloc(4096, 0x0a), Buffer.alloc(1, 0x0a)]) {
      for (;;) {
        try {
          writeSync(fd, chunk)
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break
          throw err
        }
      }
    }
  } finally {
    closeSync(fd)
  }
}
