/**
 * The upstream's failures are counted (wardline_upstream_errors_total) where the relay gives up on a
 * request, and for a timeout that is the relay's deadline timer: outside any request's try. A count
 * that throws there must cost that request only (audited once as `internal`), not reach the process,
 * where `wardline serve` stops the gateway on an uncaught exception.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'

test('a timeout whose error metric throws: the request is answered and audited once as internal, and the gateway keeps serving', async () => {
  // An upstream that takes every request and answers only the `echo` ones.
  const upstream = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString()))
    req.on('end', () => {
      // The health probe and anything else that is not a tools/call: an empty answer.
      if (!body.includes('tools/call')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      const msg = JSON.parse(body) as { id: number; params?: { name?: string } }
      if (msg.params?.name !== 'echo') return
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [] } }))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const h = await startHarness({
    upstreamUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/mcp`,
    config: { upstream_timeout_seconds: 1 },
  })
  const reached: unknown[] = []
  const record = (err: unknown): void => void reached.push(err)
  process.on('uncaughtException', record)
  process.on('unhandledRejection', record)
  try {
    h.gateway.metrics.upstream.upstreamError = () => {
      throw new Error('upstream error metric exploded')
    }
    const post = (tool: string): Promise<Response> =>
      fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...as('alice'), ...MCP_HEADERS }, body: JSON.stringify(toolCall(tool)) })
    const hung = await post('hang')
    await hung.text()
    expect(hung.status).toBe(500)
    const next = await post('echo')
    expect(next.status).toBe(200)
    await next.text()
    expect(reached).toEqual([])
    const entries = await h.audit()
    expect(entries.map((e) => [e.tool, e.decision, e.reason_code ?? null])).toEqual([
      ['hang', 'error', 'internal'],
      ['echo', 'allow', null],
    ])
  } finally {
    process.off('uncaughtException', record)
    process.off('unhandledRejection', record)
    await h.close()
    upstream.closeAllConnections()
    await new Promise((resolve) => upstream.close(resolve))
  }
})
