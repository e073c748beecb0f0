/**
 * A stage's answer-phase hooks (onOutcome, onMessage) must not throw, but the gateway promises that a
 * throw anywhere in a stage costs that one request only: answered (500 while nothing was sent), audited
 * once with reason_code `internal`, and the process keeps serving. These hooks run from undici's
 * callbacks, from the response's 'close' event and from the upstream deadline timer, none of which is
 * under Gateway.handle's try.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Agent, request } from 'undici'
import { jsonRpcStage } from '../../src/jsonrpc/stage'
import type { Exchange } from '../../src/pipeline/exchange'
import { CONTINUE, type Stage } from '../../src/pipeline/stage'
import { type Gateway } from '../../src/server/gateway'
import { type Lifecycle } from '../../src/server/lifecycle'
import { startBareGateway } from '../helpers/bare-gateway'
import { MCP_HEADERS, as, readJsonl, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

function target(ex: Exchange): string {
  return ex.calls[0]?.target ?? ''
}

/** Reads outcomes: throws for the tools named outcome-*. */
const outcomeThrower: Stage = {
  name: 'outcome-thrower',
  answers: { methods: ['tools/call'], reads: 'outcome' },
  run: () => CONTINUE,
  onOutcome(ex) {
    if (target(ex).startsWith('outcome-')) throw new Error('onOutcome exploded')
  },
}

/** Reads messages: throws for the tools named message-*. */
const messageThrower: Stage = {
  name: 'message-thrower',
  answers: { methods: ['tools/call'], reads: 'messages' },
  run: () => CONTINUE,
  onMessage(ex, text) {
    if (target(ex).startsWith('message-')) throw new Error('onMessage exploded')
    return text
  },
}

/** An upstream that answers JSON, SSE, or never (tools named *-hang), as the tool name says. */
const received = { count: 0 }

async function upstreamServer(): Promise<{ url: string; server: Server }> {
  received.count = 0
  const server = createServer((req, res) => {
    received.count++
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => {
      const msg = JSON.parse(body) as { id: number; params: { name: string } }
      const name = msg.params.name
      if (name.endsWith('-hang')) return // never answers
      const answer = JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: name }] } })
      if (name.endsWith('-sse')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`event: message\ndata: ${answer}\n\n`)
        res.end()
        return
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(answer)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, server }
}

interface Rig {
  url: string
  auditFile: string
  lifecycle: Lifecycle
  gateway: Gateway
  close(): Promise<void>
}

async function rig(): Promise<Rig> {
  const up = await upstreamServer()
  const bare = await startBareGateway({
    upstreamUrl: up.url,
    config: { upstream_timeout_seconds: 1 },
    stages: (config) => [jsonRpcStage(config.limits), outcomeThrower, messageThrower],
  })
  return {
    ...bare,
    async close() {
      await bare.close()
      up.server.closeAllConnections()
      await new Promise((resolve) => up.server.close(resolve))
    },
  }
}

describe('a throw in the answer phase', () => {
  let r: Rig | null = null
  const uncaught: unknown[] = []
  const onUncaught = (err: unknown): void => void uncaught.push(err)
  // Jest installs its own handlers; these only record what reaches the process.
  beforeAll(() => {
    process.on('uncaughtException', onUncaught)
    process.on('unhandledRejection', onUncaught)
  })
  afterAll(() => {
    process.off('uncaughtException', onUncaught)
    process.off('unhandledRejection', onUncaught)
  })
  beforeEach(() => void (uncaught.length = 0))
  afterEach(async () => {
    await r?.close()
    r = null
  })

  async function call(tool: string, agent?: Agent): Promise<{ status: number; id: string; body: string }> {
    const res = await request(`${r!.url}/mcp`, {
      method: 'POST',
      dispatcher: agent,
      headers: { ...as('alice'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall(tool, {}, 7)),
    })
    return { status: res.statusCode, id: String(res.headers['x-wardline-request-id']), body: await res.body.text() }
  }

  // The status the client gets: 500 while nothing was sent; an SSE answer's head goes out at once, so a
  // message reader that throws cuts the stream after it (the message it could not read never passes).
  test.each([
    ['outcome-json', 500],
    ['outcome-sse', 500],
    ['message-json', 500],
    ['message-sse', 200],
  ])('%s: answered %d, audited once as internal, nothing reaches the process, and the next request is served', async (tool, status) => {
    r = await rig()
    const a = await call(tool).catch((err: unknown) => ({ status: -1, id: '', body: String(err) }))
    await waitFor(() => r!.gateway.inFlight === 0, { what: 'no request in flight' })
    const next = await call('plain')
    expect(next.status).toBe(200)
    await r.lifecycle.shutdown()
    const entries = readJsonl(r.auditFile)
    expect(uncaught).toEqual([])
    expect(entries).toHaveLength(2)
    expect(entries[0]).toMatchObject({ decision: 'error', reason_code: 'internal', tool, status })
    expect(entries[0].reason).toMatch(/^WL_INTERNAL: on(Outcome|Message) exploded/)
    expect(entries[1]).toMatchObject({ decision: 'allow', status: 200, tool: 'plain' })
    if (status === 500) {
      expect(a.status).toBe(500)
      expect(JSON.parse(a.body)).toMatchObject({ error: { code: 500, message: 'Internal error' } })
    } else {
      expect(a.body).not.toContain('"result"')
    }
  })

  test('onOutcome throwing at the upstream deadline (a timer) costs that request only, and later deadlines still fire', async () => {
    r = await rig()
    const agent = new Agent({ connections: 10 })
    try {
      const first = call('outcome-hang', agent)
      const second = call('plain-hang', agent)
      const [a, b] = await Promise.all([first, second])
      expect(a.status).toBe(500)
      expect(b.status).toBe(504)
      expect(uncaught).toEqual([])
      await r.lifecycle.shutdown()
      const entries = readJsonl(r.auditFile)
      expect(entries).toHaveLength(2)
      expect(entries.find((e) => e.tool === 'outcome-hang')).toMatchObject({ decision: 'error', reason_code: 'internal' })
      expect(entries.find((e) => e.tool === 'plain-hang')).toMatchObject({ decision: 'error', reason_code: 'upstream.timeout' })
    } finally {
      await agent.close()
    }
  })

  test('onOutcome throwing when the client leaves before the answer: one entry, nothing reaches the process', async () => {
    r = await rig()
    const ac = new AbortController()
    const p = request(`${r.url}/mcp`, {
      method: 'POST',
      headers: { ...as('alice'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall('outcome-hang', {}, 7)),
      signal: ac.signal,
    }).catch(() => null)
    await waitFor(() => received.count === 1, { what: 'the upstream to hold the request' })
    ac.abort()
    await p
    await waitFor(() => r!.gateway.inFlight === 0, { what: 'no request in flight' })
    expect(uncaught).toEqual([])
    await r.lifecycle.shutdown()
    const entries = readJsonl(r.auditFile)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({ decision: 'error', reason_code: 'internal', tool: 'outcome-hang' })
  })
})
