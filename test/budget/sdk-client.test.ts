/**
 * The official MCP SDK client, throttled by the gateway in front of a stateful (session) SDK server:
 * the 429 surfaces as an error on that one call and the session carries on.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { as } from '../helpers/harness'
import { type BudgetHarness, startBudgetHarness } from './budget-harness'

let h: BudgetHarness
beforeEach(async () => {
  h = await startBudgetHarness({ mode: 'stateful', budget: { requests_per_window: 2, window_seconds: 60 } })
})
afterEach(async () => {
  await h.close()
})

function textOf(result: unknown): string {
  return (result as { content: Array<{ text: string }> }).content[0].text
}

test('the third callTool under a limit of 2 rejects with HTTP 429, and the same client keeps working', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('alice', 'acme') } })
  const client = new Client({ name: 'budget-test', version: '1.0.0' })
  await client.connect(transport)
  const session = transport.sessionId
  expect(session).toBeTruthy()

  expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'one' } }))).toBe('one')
  expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'two' } }))).toBe('two')
  const third = client.callTool({ name: 'echo', arguments: { text: 'three' } })
  await expect(third).rejects.toMatchObject({ code: 429 })
  await expect(third).rejects.toThrow(/429/)

  // The 429 carried no Mcp-Session-Id, so the client still holds its session.
  expect(transport.sessionId).toBe(session)
  expect((await client.listTools()).tools.length).toBeGreaterThan(0)

  h.advance(60)
  expect(textOf(await client.callTool({ name: 'echo', arguments: { text: 'after the window' } }))).toBe('after the window')
  await client.close()

  const calls = (await h.audit()).filter((e) => e.method === 'tools/call')
  expect(calls.map((e) => [e.decision, e.status])).toEqual([
    ['allow', 200],
    ['allow', 200],
    ['throttled', 429],
    ['allow', 200],
  ])
})
