/**
 * A call the MCP server received but answered after upstream_timeout_seconds is charged: the
 * server may have run it, so refunding it would hand out free calls (a slow tool ran 11 times under
 * a budget of 3 with that refund). The official SDK on both sides: an McpServer on port 0 whose tool runs
 * until the test lets it finish, and the SDK client calling through a real gateway.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { gate } from '../e2e/raw-upstream'
import { as, metricSample } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type BudgetHarness, startBudgetHarness } from './budget-harness'

/** A stateless SDK server with one tool, `slow`, that counts its runs and returns only once `release` is called. */
async function startSlowServer(): Promise<{ url: string; runs: () => number; release: () => void; close: () => Promise<void> }> {
  let runs = 0
  const finish = gate()
  const server: Server = createServer((req, res) => {
    const mcp = new McpServer({ name: 'slow', version: '1.0.0' })
    mcp.registerTool('slow', { description: 'Outlasts the gateway’s upstream timeout' }, async () => {
      runs++
      await finish.wait
      return { content: [{ type: 'text', text: 'done at last' }] }
    })
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on('close', () => {
      void transport.close()
      void mcp.close()
    })
    void mcp.connect(transport).then(() => transport.handleRequest(req, res))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    runs: () => runs,
    release: () => finish.open(),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

let h: BudgetHarness | null = null
let slow: Awaited<ReturnType<typeof startSlowServer>> | null = null
afterEach(async () => {
  slow?.release()
  await h?.close()
  await slow?.close()
  h = null
  slow = null
})

test('a slow tool that outlasts upstream_timeout_seconds is charged: under a budget of 3, the 4th timed-out call is 429 and the tool ran 3 times', async () => {
  slow = await startSlowServer()
  h = await startBudgetHarness({
    budget: { requests_per_window: 3, window_seconds: 60 },
    // 2 s: far longer than the SDK server needs to start the tool on loopback, even on a loaded
    // machine, so every call the gateway forwards has run by the time it times out.
    config: { upstream: slow.url, upstream_timeout_seconds: 2 },
  })
  const client = new Client({ name: 'timeout-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice', 'acme') } }))

  const codes: unknown[] = []
  for (let i = 0; i < 11; i++) {
    codes.push(
      await client.callTool({ name: 'slow', arguments: {} }).then(
        () => 200,
        (err: { code?: unknown }) => err.code,
      ),
    )
  }
  await client.close()
  expect(codes).toEqual([504, 504, 504, 429, 429, 429, 429, 429, 429, 429, 429])
  await waitFor(() => slow!.runs() >= 3, { what: 'the three forwarded calls to start the tool' })
  expect(slow.runs()).toBe(3)

  const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
  expect(calls.map((e) => [e.decision, e.status])).toEqual([
    ['error', 504],
    ['error', 504],
    ['error', 504],
    ...Array.from({ length: 8 }, () => ['throttled', 429]),
  ])
  for (const e of calls.slice(0, 3)) expect(e.reason).toBe('WL_UPSTREAM_TIMEOUT: upstream sent no response headers in time')
  expect(await metricSample(h.url, 'wardline_budget_refunds_total{reason="unserved"}')).toBe(0)
})
