/**
 * Red team (per-tool forwarded-call metrics): a tool name chosen to break the exposition
 * format (quotes, backslashes, a line break) must come out escaped, never as a forged series; and a
 * reload that drops a configured tool must not leave its series counting under its old name. A name
 * with a line break is refused before it could reach /metrics.
 * A real gateway in front of the example MCP server; /metrics read as Prometheus would.
 */
import { type Harness, MCP_HEADERS, as, configFrom, startHarness, toolCall } from '../helpers/harness'

const WEIRD = 'we"ird\\tool} wardline_forged_total 1e9 #'

let h: Harness
beforeAll(async () => {
  h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { budget_enforcement: true },
      budget: {
        requests_per_window: 1_000_000,
        tools: { [WEIRD]: { requests_per_window: 1_000_000 }, echo: { requests_per_window: 1_000_000 } },
      },
    },
  })
})
afterAll(() => h.close())

async function call(tool: string): Promise<number> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as('alice', 'acme') },
    body: JSON.stringify(toolCall(tool, { text: 'x' })),
  })
  await res.arrayBuffer()
  return res.status
}

test('a configured tool name holding a quote, a backslash, a brace and a sample is one escaped label value, never a forged series', async () => {
  expect(await call(WEIRD)).toBe(200)
  const text = await (await fetch(`${h.url}/metrics`)).text()
  expect(text).not.toMatch(/^wardline_forged_total/m)
  const escaped = 'we\\"ird\\\\tool} wardline_forged_total 1e9 #'
  expect(text).toContain(`wardline_forwarded_calls_total{outcome="ok",tool="${escaped}"} 1`)
  expect(text).toContain(`wardline_forwarded_call_duration_seconds_count{tool="${escaped}"} 1`)
  // Every sample line is `name{labels} value` or `name value`: nothing the name broke off.
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    expect(line).toMatch(/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$/)
  }
})

test('a tool name with a line break never reaches the metrics: the call is refused 400 before it is forwarded', async () => {
  const named = 'x\nwardline_forged_total 1'
  expect(await call(named)).toBe(400)
  const text = await (await fetch(`${h.url}/metrics`)).text()
  expect(text).not.toMatch(/^wardline_forged_total/m)
})

test('a reload that removes a configured tool ends its series and counts its later calls under "other"', async () => {
  expect(await call('echo')).toBe(200)
  const before = await (await fetch(`${h.url}/metrics`)).text()
  expect(before).toContain('wardline_forwarded_calls_total{outcome="ok",tool="echo"} 1')
  const tree = { ...h.tree, budget: { requests_per_window: 1_000_000 } }
  h.gateway.reload(configFrom(tree, {}, '/tmp'))
  expect(await call('echo')).toBe(200)
  const after = await (await fetch(`${h.url}/metrics`)).text()
  expect(after).not.toContain('tool="echo"')
  expect(after).toMatch(/wardline_forwarded_calls_total\{outcome="ok",tool="other"\} [1-9]/)
})
