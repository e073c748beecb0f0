/**
 * The answer and finish phases of the pipeline (src/pipeline/stage.ts, answer.ts), driven through a
 * real Gateway, the real JSON-RPC stage and relay, and a hand-written upstream on port 0. The stages
 * here are small test stages: what they do is what a list filter or a refund will do.
 */
import { type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { AuditTrail } from '../../src/audit/trail'
import { AuditWriter } from '../../src/audit/writer'
import { JsonlAuditSink } from '../../src/audit/jsonl-sink'
import { jsonRpcStage } from '../../src/jsonrpc/stage'
import { silentLogger } from '../../src/log'
import { AuditMetrics } from '../../src/audit/metrics'
import type { Exchange } from '../../src/pipeline/exchange'
import { CONTINUE, type Outcome, type Stage } from '../../src/pipeline/stage'
import { Gateway } from '../../src/server/gateway'
import { Upstream } from '../../src/upstream/forward'
import { type RawUpstream, type SeenRequest, startRawUpstream } from '../e2e/raw-upstream'
import { configFrom, readJsonl, rpc, tempDir, toolCall } from '../helpers/harness'
import { open, readAll, send } from '../helpers/http-client'

type Answer = (req: SeenRequest, res: ServerResponse) => void

interface Rig {
  url: string
  events: string[]
  auditFile: string
  audit: AuditTrail
  upstream: RawUpstream
  close(): Promise<void>
}

/** A stage that lets everything through and writes down every phase it is called in. */
function recorder(name: string, events: string[], answers?: Stage['answers']): Stage {
  return {
    name,
    answers,
    run: () => {
      events.push(`run:${name}`)
      return CONTINUE
    },
    onOutcome: (_ex: Exchange, o: Outcome) => {
      events.push(`outcome:${name}:${o.status}:${o.failure?.code ?? '-'}:${o.sent}`)
    },
    finish: () => {
      events.push(`finish:${name}`)
    },
  }
}

/** Hides every tool whose name starts with `secret` from a tools/list answer; returns the same text when none is hidden. */
function listFilter(events: string[]): Stage {
  return {
    name: 'filter',
    answers: { methods: ['tools/list'], reads: 'messages' },
    run: () => CONTINUE,
    onMessage(_ex, message) {
      events.push(`message:${message.length}`)
      const parsed = JSON.parse(message) as { result?: { tools?: Array<{ name: string }> } }
      const tools = parsed.result?.tools
      if (tools === undefined || !tools.some((t) => t.name.startsWith('secret'))) return message
      parsed.result!.tools = tools.filter((t) => !t.name.startsWith('secret'))
      return JSON.stringify(parsed)
    },
  }
}

async function rig(answer: Answer, extra: (events: string[]) => Stage[], upstreamUrl?: string): Promise<Rig> {
  const upstream = await startRawUpstream((_req, res, seen) => answer(seen, res))
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const config = configFrom({ listen: '127.0.0.1:0', upstream: upstreamUrl ?? upstream.url, auth: { mode: 'header' } }, {}, dir)
  const audit = new AuditTrail(
    [new AuditWriter(await JsonlAuditSink.open(auditFile), silentLogger(), { maxQueueEntries: 10_000 })],
    new AuditMetrics(),
  )
  const events: string[] = []
  const relay = new Upstream({ ...config.upstream!, timeoutSeconds: 2 })
  const gateway = new Gateway([jsonRpcStage(config.limits), ...extra(events)], relay, audit, silentLogger())
  const server: Server = createServer((req, res) => void gateway.handle(req, res))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    events,
    auditFile,
    audit,
    upstream,
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await relay.destroy()
      await audit.close()
      await upstream.close()
    },
  }
}

const JSON_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }

const TOOLS = { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }, { name: 'secret_admin' }, { name: 'add' }] } }

describe('the answer phase', () => {
  let r: Rig | null = null
  afterEach(async () => {
    await r?.close()
    r = null
  })

  test('a JSON answer a stage rewrites reaches the client rewritten, with its new length and the upstream headers', async () => {
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'kept' })
        res.end(JSON.stringify(TOOLS))
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(rpc('tools/list', {}, 1)))
    expect(reply.status).toBe(200)
    expect(JSON.parse(reply.body)).toEqual({ jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }, { name: 'add' }] } })
    expect(reply.headers['content-length']).toBe(String(Buffer.byteLength(reply.body)))
    expect(reply.headers['x-upstream']).toBe('kept')
  })

  test('a JSON answer a stage leaves alone is relayed byte for byte, odd spacing and all', async () => {
    const original = '{ "jsonrpc":"2.0",  "id":1,\n "result":{"tools":[{"name":"echo"}]}}  '
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' })
        res.end(original)
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(rpc('tools/list', {}, 1)))
    expect(reply.body).toBe(original)
    expect(reply.headers['content-length']).toBe(String(Buffer.byteLength(original)))
    expect(r.events).toEqual([`message:${original.length}`])
  })

  test('SSE: events reach the client one by one while the stream stays open; only the changed one is rebuilt', async () => {
    let finish = (): void => undefined
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        // A server-to-client request first, CRLF line ends and a comment: it must arrive unchanged
        // before the upstream ends the stream (the client has to answer it for the stream to go on).
        res.write(': hello\r\nid: 7\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage"}\r\n\r\n')
        finish = () => {
          res.write(`event: message\ndata: ${JSON.stringify(TOOLS)}\n\n`)
          res.end()
        }
      },
      (events) => [listFilter(events)],
    )
    const res = await open(r.url, { method: 'POST', headers: JSON_HEADERS, body: JSON.stringify(rpc('tools/list', {}, 1)) })
    expect(res.headers['content-type']).toBe('text/event-stream')
    const first = await new Promise<string>((resolve) => res.once('data', (c: Buffer) => resolve(c.toString('utf8'))))
    expect(first).toBe(': hello\r\nid: 7\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage"}\r\n\r\n')
    finish()
    const rest = await readAll(res)
    expect(rest).toBe(
      `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }, { name: 'add' }] } })}\n\n`,
    )
  })

  test('SSE events split across chunks at any byte are put back together, multi-line data included', async () => {
    const stream = `data: {"jsonrpc":"2.0",\ndata: "id":1,"result":{"tools":[{"name":"secret_x"},{"name":"é"}]}}\n\n`
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        const bytes = Buffer.from(stream)
        let i = 0
        const next = (): void => {
          if (i >= bytes.length) return void res.end()
          res.write(bytes.subarray(i, i + 3))
          i += 3
          setImmediate(next)
        }
        next()
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(rpc('tools/list', {}, 1)))
    expect(reply.body).toBe(`data: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'é' }] } })}\n\n`)
  })

  test('an answer to a method no stage reads is not read: no message hook, the upstream keeps its Accept-Encoding', async () => {
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'secret_admin' }] } }))
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', { ...JSON_HEADERS, 'accept-encoding': 'gzip' }, JSON.stringify(toolCall('echo', {}, 1)))
    expect(JSON.parse(reply.body)).toMatchObject({ result: { tools: [{ name: 'secret_admin' }] } })
    expect(r.events).toEqual([])
    expect(r.upstream.seen[0].headers['accept-encoding']).toBe('gzip')
  })

  test('for a reader the upstream is asked for an unencoded answer, and an encoded one is refused with 502, never passed unread', async () => {
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
        res.end(gzipSync(JSON.stringify(TOOLS)))
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', { ...JSON_HEADERS, 'accept-encoding': 'gzip' }, JSON.stringify(rpc('tools/list', {}, 1)))
    expect(r.upstream.seen[0].headers['accept-encoding']).toBeUndefined()
    expect(reply.status).toBe(502)
    expect(reply.body).not.toContain('secret_admin')
    await r.audit.flush()
    expect(readJsonl(r.auditFile)[0]).toMatchObject({
      decision: 'error',
      status: 502,
      reason: expect.stringContaining('content-encoded (gzip)') as unknown,
    })
  })

  test('a batch is read when any of its calls is, as one message (the whole array)', async () => {
    r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify([{ jsonrpc: '2.0', id: 2, result: {} }, TOOLS]))
      },
      (events) => [listFilter(events)],
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify([toolCall('echo', {}, 2), rpc('tools/list', {}, 1)]))
    expect(r.events).toHaveLength(1)
    expect(reply.body).toContain('secret_admin') // the test filter reads single messages only: the array went through it unchanged
  })
})

describe('outcomes', () => {
  let r: Rig | null = null
  afterEach(async () => {
    await r?.close()
    r = null
  })

  test('a reader hears the upstream status before the client gets any byte, and only for its methods', async () => {
    r = await rig(
      (_seen, res) => {
        res.writeHead(503, { 'content-type': 'application/json' })
        res.end('{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"busy"}}')
      },
      (events) => [recorder('calls', events, { methods: ['tools/call'], reads: 'outcome' })],
    )
    await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(rpc('tools/list', {}, 1)))
    await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(toolCall('echo', {}, 1)))
    expect(r.events).toEqual(['run:calls', 'finish:calls', 'run:calls', 'outcome:calls:503:-:true', 'finish:calls'])
  })

  test('an upstream that cannot be reached: the reader hears the failure (status 0, never sent), the client gets 502', async () => {
    const dead = createServer()
    await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve))
    const deadUrl = `http://127.0.0.1:${(dead.address() as AddressInfo).port}`
    await new Promise<void>((resolve) => dead.close(() => resolve()))
    r = await rig(
      () => undefined,
      (events) => [recorder('calls', events, { methods: ['tools/call'], reads: 'outcome' })],
      deadUrl,
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(toolCall('echo', {}, 1)))
    expect(reply.status).toBe(502)
    // Never written to the upstream (no connection): sent is false.
    expect(r.events).toEqual(['run:calls', 'outcome:calls:0:WL_UPSTREAM_UNREACHABLE:false', 'finish:calls'])
  })

  test('an upstream that never answers: the reader hears the timeout once (sent), not a second failure from the abort', async () => {
    r = await rig(
      () => undefined, // holds the request until the gateway gives up
      (events) => [recorder('calls', events, { methods: ['tools/call'], reads: 'outcome' })],
    )
    const reply = await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(toolCall('echo', {}, 1)))
    expect(reply.status).toBe(504)
    expect(r.events).toEqual(['run:calls', 'outcome:calls:0:WL_UPSTREAM_TIMEOUT:true', 'finish:calls'])
  })
})

describe('the finish phase', () => {
  test('runs once per request, last stage first, for exactly the stages whose run was called', async () => {
    const refuser: Stage = {
      name: 'refuser',
      run: (ex) =>
        ex.calls[0]?.method === 'tools/call'
          ? { status: 403, decision: 'deny', code: 'policy.denied', reason: 'no', message: 'Forbidden' }
          : CONTINUE,
      finish: () => undefined,
    }
    const r = await rig(
      (_seen, res) => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{"jsonrpc":"2.0","id":1,"result":{}}')
      },
      (events) => [recorder('a', events), refuser, recorder('b', events)],
    )
    try {
      expect((await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(rpc('ping', undefined, 1)))).status).toBe(200)
      expect(r.events.splice(0)).toEqual(['run:a', 'run:b', 'finish:b', 'finish:a'])
      expect((await send(r.url, 'POST', JSON_HEADERS, JSON.stringify(toolCall('echo', {}, 1)))).status).toBe(403)
      expect(r.events).toEqual(['run:a', 'finish:a'])
    } finally {
      await r.close()
    }
  })
})
