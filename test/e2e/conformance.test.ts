/**
 * The official MCP conformance suite's `dns-rebinding-protection` scenario, run against an SDK server
 * directly and through the gateway: a browser on loopback gets the same answers either way. The
 * reference is the suite's fixtures on the SDK's own loopback setup (conformance/fixture-server.ts:
 * createMcpExpressApp on 127.0.0.1, which validates Host); the gateway listens on 127.0.0.1 with the
 * default (empty) allowed_origins.
 */
import { type FixtureServer, startFixtureServer } from '../conformance/fixture-server'
import { type ConformanceCheck, identityFront, runConformance, scenarioResults } from '../conformance/run'
import { type Harness, startHarness } from '../helpers/harness'

jest.setTimeout(120_000)

let reference: FixtureServer
let h: Harness
let front: Awaited<ReturnType<typeof identityFront>>

beforeAll(async () => {
  reference = await startFixtureServer()
  h = await startHarness({ upstreamUrl: reference.url })
  front = await identityFront(h.url, 'conformance')
})

afterAll(async () => {
  await front.close()
  await h.close()
  await reference.close()
})

const outcome = (checks: readonly ConformanceCheck[]) => checks.map(({ id, status }) => ({ id, status }))

test('dns-rebinding-protection: the gateway passes as the SDK server does (a foreign Host/Origin refused, its own accepted)', async () => {
  const direct = await runConformance(`${reference.url}/mcp`, 'dns-rebinding-protection')
  const through = await runConformance(`${front.url}/mcp`, 'dns-rebinding-protection')
  const expected = [
    { id: 'localhost-host-rebinding-rejected', status: 'SUCCESS' },
    { id: 'localhost-host-valid-accepted', status: 'SUCCESS' },
  ]
  expect(outcome(direct)).toEqual(expected)
  expect(outcome(through)).toEqual(outcome(direct))
  // What the gateway decided, from its audit: the rebinding page refused at the Origin check, the
  // page on its own (loopback) origin served.
  const entries = await h.audit()
  expect(entries.map((e) => [e.method, e.status, e.decision])).toEqual([
    ['POST', 403, 'error'],
    ['initialize', 200, 'passthrough'],
  ])
  expect(entries[0].reason).toBe('origin http://evil.example.com not in allowed_origins')
})

/**
 * Every server scenario of the suite, direct and through the gateway: the gateway passes exactly the
 * scenarios the server passes. About 20 s with its child processes, so it runs on request:
 * WARDLINE_CONFORMANCE_ALL=1 npx jest test/e2e/conformance.test.ts
 */
const everyScenario = process.env.WARDLINE_CONFORMANCE_ALL === '1' ? test : test.skip
everyScenario(
  'every server scenario: the gateway passes exactly the scenarios the server passes direct',
  async () => {
    const direct = scenarioResults(await runConformance(`${reference.url}/mcp`, undefined, 600_000))
    const through = scenarioResults(await runConformance(`${front.url}/mcp`, undefined, 600_000))
    const passed = (m: Map<string, boolean>) => [...m.values()].filter(Boolean).length
    process.stdout.write(`conformance: direct ${passed(direct)}/${direct.size}, through the gateway ${passed(through)}/${through.size}\n`)
    expect(Object.fromEntries(through)).toEqual(Object.fromEntries(direct))
  },
  1_300_000,
)
