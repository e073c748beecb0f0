/**
 * Refunds of calls the MCP server never served (docs/budget.md, "What a call costs": a call that
 * never reached the upstream, or that it answered 429/503, is refunded), through a real gateway, a real MemoryBudgetStore on a
 * manual clock and a hand-written upstream on port 0 whose behaviour each test switches. What is
 * asserted is what an outsider sees: statuses, the RateLimit fields, later calls admitted or
 * throttled, the audit trail and /metrics.
 */
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { closedPort } from '../e2e/raw-upstream'
import { MCP_HEADERS, as, metricSample, toolCall } from '../helpers/harness'
import { open } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'
import { type Reply, manualClock, startBudgetHarness } from './budget-harness'
import { type Mode, answer, closeRigs, closeWithRigs, remaining, startRig } from './upstream-rig'

/**
 * Identity 2, the acme tenant 3, the search tool 4 (fetch 1, for batches): every tier has a count a
 * missed refund would show, each in its own RateLimit item.
 */
const BUDGET = {
  requests_per_window: 2,
  window_seconds: 60,
  tenants: { acme: { requests_per_window: 3, window_seconds: 60 } },
  tools: { search: { requests_per_window: 4, window_seconds: 60 }, fetch: { requests_per_window: 1, window_seconds: 60 } },
}

/** The RateLimit field of a fresh caller: nothing used in any tier. */
const FULL = { tool: 4, tenant: 3, identity: 2 }

afterEach(closeRigs)

/** The JSON-RPC error code of a gateway's own answer (429 for its throttle, 502/504 for upstream failures). */
function errorCode(reply: Reply): unknown {
  return (reply.json as { error?: { code?: unknown } } | null)?.error?.code
}

describe('a call the MCP server never served is refunded in every tier', () => {
  test('an unreachable upstream: every call gets 502, none is counted, and the audit says error and refunded', async () => {
    // Two gateways on one store: one whose upstream port refuses connections, one whose upstream
    // answers, so the counts the first left behind can be read from the second's RateLimit fields.
    const clock = manualClock()
    const store = new MemoryBudgetStore({ now: clock.now })
    const port = await closedPort()
    const dead = await startBudgetHarness({ budget: BUDGET, store, config: { upstream: `http://127.0.0.1:${port}` } })
    closeWithRigs(() => dead.close())
    const live = await startRig({ budget: BUDGET, store })

    // Three calls where the identity allows two: without refunds the third would be throttled (429).
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await dead.post(toolCall('search', {}, i))).status)
    expect(statuses).toEqual([502, 502, 502])

    const first = await live.h.post(toolCall('search'))
    expect(first.status).toBe(200)
    expect(remaining(first)).toEqual({ tool: 3, tenant: 2, identity: 1 }) // only this call is counted
    expect((await live.h.post(toolCall('search'))).status).toBe(200)
    const third = await live.h.post(toolCall('search'))
    expect([third.status, errorCode(third)]).toEqual([429, 429]) // the full two, and no more

    const entries = await dead.audit()
    expect(entries).toHaveLength(3)
    for (const e of entries) {
      expect(e).toMatchObject({ decision: 'error', status: 502, identity: 'alice', tool: 'search' })
      expect(e.reason).toMatch(
        /^WL_UPSTREAM_UNREACHABLE: upstream unreachable: .*; budget refunded: the call never reached the MCP server \(WL_UPSTREAM_UNREACHABLE\)$/,
      )
    }
  })

  test.each([429, 503] as const)(
    'an upstream %i is forwarded as it is, with RateLimit fields that count the refund, and audited as allow with the reason',
    async (status) => {
      const rig = await startRig({ budget: BUDGET })
      rig.mode = status
      for (let i = 0; i < 3; i++) {
        const refused = await rig.h.post(toolCall('search', {}, i))
        expect(refused.status).toBe(status)
        expect(refused.json).toEqual({ jsonrpc: '2.0', id: i, error: { code: -32000, message: `upstream says ${status}` } }) // the upstream's body
        expect(refused.headers.get('retry-after')).toBe('7') // the upstream's
        expect(remaining(refused)).toEqual(FULL) // after the refund; without it identity would read 1, then 0
      }

      rig.mode = 200
      const served = [await rig.h.post(toolCall('search')), await rig.h.post(toolCall('search'))]
      expect(served.map((r) => r.status)).toEqual([200, 200])
      expect(served.map(remaining)).toEqual([
        { tool: 3, tenant: 2, identity: 1 },
        { tool: 2, tenant: 1, identity: 0 },
      ])
      const over = await rig.h.post(toolCall('search'))
      expect([over.status, errorCode(over)]).toEqual([429, 429])

      const entries = await rig.h.audit()
      expect(entries.map((e) => [e.decision, e.status, e.reason ?? ''])).toEqual([
        ['allow', status, `budget refunded: the MCP server answered ${status}`],
        ['allow', status, `budget refunded: the MCP server answered ${status}`],
        ['allow', status, `budget refunded: the MCP server answered ${status}`],
        ['allow', 200, ''],
        ['allow', 200, ''],
        ['throttled', 429, 'rate limit exceeded: identity bucket, 2 requests per 60s window'],
      ])
    },
  )

  test('a batch of two tools/call refused with 503 gets both charges back, each tool its own', async () => {
    const rig = await startRig({ budget: BUDGET })
    const batch = [toolCall('search', {}, 1), toolCall('fetch', {}, 2)]
    rig.mode = 503
    const refused = await rig.h.post(batch)
    expect(refused.status).toBe(503)
    // Both calls back: the identity has its 2, the tenant its 3, and fetch (the tighter tool shown) its 1.
    expect(remaining(refused)).toEqual({ tool: 1, tenant: 3, identity: 2 })

    // The same batch again fits only if both tools and both identity units came back (fetch allows 1).
    rig.mode = 200
    const served = await rig.h.post(batch)
    expect(served.status).toBe(200)
    expect(remaining(served)).toEqual({ tool: 0, tenant: 1, identity: 0 })
    const over = await rig.h.post(toolCall('search', {}, 3))
    expect([over.status, errorCode(over)]).toEqual([429, 429])

    const entries = await rig.h.audit()
    const refusedId = entries[0].request_id.split('/')[0]
    expect(entries.slice(0, 2).map((e) => [e.request_id, e.tool, e.decision, e.status, e.reason])).toEqual([
      [`${refusedId}/0`, 'search', 'allow', 503, 'budget refunded: the MCP server answered 503'],
      [`${refusedId}/1`, 'fetch', 'allow', 503, 'budget refunded: the MCP server answered 503'],
    ])
  })

  test('a call still waiting for a free upstream connection when upstream_timeout_seconds passes: 504, refunded (never sent)', async () => {
    // One upstream connection, held by bob's answer: its head arrived, its body never ends, so bob's
    // call is past its deadline's reach and alice's waits in the gateway's pool until hers passes.
    const store = new MemoryBudgetStore({ now: manualClock().now })
    const rig = await startRig({
      store,
      budget: { requests_per_window: 2, window_seconds: 60 },
      config: { upstream_connections: 1, upstream_timeout_seconds: 0.5 },
    })
    const live = await startRig({ store, budget: { requests_per_window: 2, window_seconds: 60 } })
    rig.mode = 'stall'
    const bob = fetch(`${rig.h.url}/mcp`, {
      method: 'POST',
      headers: { ...as('bob', 'acme'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall('search')),
    })
    await waitFor(() => rig.held.length === 1, { what: "the upstream to hold bob's call" })
    rig.held[0].res.writeHead(200, { 'content-type': 'text/event-stream' })
    rig.held[0].res.flushHeaders()
    const bobAnswer = await bob
    expect(bobAnswer.status).toBe(200)

    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await rig.h.post(toolCall('search', {}, i))).status)
    expect(statuses).toEqual([504, 504, 504]) // the third would be 429 had the first two been kept
    expect(rig.upstream.seen).toHaveLength(1) // bob's only: alice's calls never reached the upstream

    const served = await live.h.post(toolCall('search'))
    expect(served.status).toBe(200)
    expect(remaining(served)).toEqual({ identity: 1 }) // only this call counts
    const entries = (await rig.h.audit()).filter((e) => e.identity === 'alice')
    expect(entries).toHaveLength(3)
    for (const e of entries) {
      expect(e).toMatchObject({ decision: 'error', status: 504 })
      expect(e.reason).toMatch(/^WL_UPSTREAM_TIMEOUT: .*; budget refunded: the call never reached the MCP server \(WL_UPSTREAM_TIMEOUT\)$/)
    }
    rig.held[0].res.end()
    await bobAnswer.text()
  })

  test('a client that leaves while its call waits for a free upstream connection is refunded: the call is never sent', async () => {
    // One upstream connection, held by bob's stalled call: alice's call waits in the gateway's pool.
    const store = new MemoryBudgetStore({ now: manualClock().now })
    const rig = await startRig({ store, budget: { requests_per_window: 2, window_seconds: 60 }, config: { upstream_connections: 1 } })
    rig.mode = 'stall'
    const bob = rig.h.post(toolCall('search'), 'bob')
    await waitFor(() => rig.held.length === 1, { what: "the upstream to hold bob's call" })
    const client = new AbortController()
    const leaving = open(`${rig.h.url}/mcp`, {
      method: 'POST',
      headers: { ...as('alice', 'acme'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall('search')),
      signal: client.signal,
    }).catch((err: unknown) => err)
    // alice's bucket opens when her call is charged; the rest, down to the hand-over to the pool, runs
    // in the same turn of the event loop, so once the test sees the bucket her call is queued.
    await waitFor(() => store.bucketCount === 2, { what: "alice's call to be charged and queued for the upstream" })
    client.abort()
    await leaving
    await waitFor(async () => (await rig.h.audit()).some((e) => e.identity === 'alice'), { what: "alice's audit entry" })
    answer(rig.held[0].res, 200, rig.held[0].body)
    expect((await bob).status).toBe(200)
    rig.mode = 200
    expect(rig.upstream.seen).toHaveLength(1) // alice's call never reached the upstream

    const next = await rig.h.post(toolCall('search'))
    expect(next.status).toBe(200)
    expect(remaining(next)).toEqual({ identity: 1 }) // her abandoned call was never sent, so only this one counts
    const entry = (await rig.h.audit()).find((e) => e.identity === 'alice')
    expect(entry).toMatchObject({ status: 499, reason: 'client closed the connection; budget refunded: the call never left the gateway' })
  })
})

describe('a call the MCP server may have served is not refunded', () => {
  test.each([200, 500, 400] as const)('an upstream %i keeps the charge in every tier', async (status) => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = status
    const answered = [await rig.h.post(toolCall('search', {}, 1)), await rig.h.post(toolCall('search', {}, 2))]
    expect(answered.map((r) => r.status)).toEqual([status, status])
    expect(answered.map(remaining)).toEqual([
      { tool: 3, tenant: 2, identity: 1 },
      { tool: 2, tenant: 1, identity: 0 },
    ])
    const over = await rig.h.post(toolCall('search', {}, 3))
    expect([over.status, errorCode(over)]).toEqual([429, 429]) // the gateway's own throttle: both were counted
    expect(rig.upstream.seen).toHaveLength(2)
    const reasons = (await rig.h.audit()).slice(0, 2).map((e) => [e.decision, e.status, e.reason ?? ''])
    expect(reasons).toEqual([
      ['allow', status, ''],
      ['allow', status, ''],
    ])
  })

  test('an upstream that resets the connection after receiving the call: 502, charged (it may have run it)', async () => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = 'reset'
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await rig.h.post(toolCall('search', {}, i))).status)
    expect(statuses).toEqual([502, 502, 429]) // the identity's two were used by the first two
    expect(rig.upstream.seen).toHaveLength(2) // each of them reached the upstream, which dropped it

    const entries = (await rig.h.audit()).slice(0, 2)
    for (const e of entries) {
      expect(e).toMatchObject({ decision: 'error', status: 502 })
      expect(e.reason).toMatch(/^WL_UPSTREAM_FAILED: [^;]*$/) // no refund
    }
    expect(await metricSample(rig.h.url, 'wardline_budget_refunds_total{reason="unserved"}')).toBe(0)
  })

  test('an upstream that sends no headers within upstream_timeout_seconds after receiving the call: 504, charged', async () => {
    // The counts are read through a second gateway on the same store, with the default timeout: a
    // loaded machine could take longer than 0.3 s to serve even an answering upstream.
    const store = new MemoryBudgetStore({ now: manualClock().now })
    const rig = await startRig({ budget: BUDGET, store, config: { upstream_timeout_seconds: 0.3 } })
    const live = await startRig({ budget: BUDGET, store })
    rig.mode = 'stall'
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await rig.h.post(toolCall('search', {}, i))).status)
    expect(statuses).toEqual([504, 504, 429]) // refunding timed-out calls would make the third a third 504
    expect(rig.held).toHaveLength(2) // the upstream received both: it may be running them

    const over = await live.h.post(toolCall('search'))
    expect([over.status, errorCode(over)]).toEqual([429, 429])

    const entries = (await rig.h.audit()).slice(0, 2)
    for (const e of entries)
      expect(e).toMatchObject({ decision: 'error', status: 504, reason: 'WL_UPSTREAM_TIMEOUT: upstream sent no response headers in time' })
    expect(await metricSample(rig.h.url, 'wardline_budget_refunds_total{reason="unserved"}')).toBe(0)
  })

  test('a client that leaves after the call reached the upstream keeps its charge (the server may be running it)', async () => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = 'stall'
    const client = new AbortController()
    // node:http, whose abort closes the socket at once (fetch's may keep it until its keep-alive timeout).
    const leaving = open(`${rig.h.url}/mcp`, {
      method: 'POST',
      headers: { ...as('alice', 'acme'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall('search')),
      signal: client.signal,
    }).catch((err: unknown) => err)
    await waitFor(() => rig.held.length === 1, { what: 'the upstream to receive the call' })
    client.abort()
    await leaving
    // The gateway aborts the upstream request once the client is gone.
    expect(await rig.upstream.seen[0].closed).toEqual({ finished: false })
    const left = await waitFor(async () => (await rig.h.audit()).find((e) => e.status === 499), {
      what: "the abandoned call's audit entry",
    })
    expect(left).toMatchObject({ decision: 'allow', reason: 'client closed the connection' })

    rig.mode = 200
    const served = await rig.h.post(toolCall('search'))
    expect(served.status).toBe(200)
    expect(remaining(served)).toEqual({ tool: 2, tenant: 1, identity: 0 }) // the abandoned call still counts
    const over = await rig.h.post(toolCall('search'))
    expect([over.status, errorCode(over)]).toEqual([429, 429])
    expect(await metricSample(rig.h.url, 'wardline_budget_refunds_total{reason="unserved"}')).toBe(0)
  })
})

test('wardline_budget_refunds_total{reason="unserved"} counts each refund and nothing else', async () => {
  const rig = await startRig({ budget: { requests_per_window: 100, window_seconds: 60 } })
  const series = 'wardline_budget_refunds_total{reason="unserved"}'
  const modes: Mode[] = [503, 429, 'reset', 200, 500, 400, 503]
  const statuses: number[] = []
  for (const mode of modes) {
    rig.mode = mode
    statuses.push((await rig.h.post(toolCall('search'))).status)
  }
  expect(statuses).toEqual([503, 429, 502, 200, 500, 400, 503])
  expect(await metricSample(rig.h.url, series)).toBe(3)
  expect(await metricSample(rig.h.url, 'wardline_budget_refund_failures_total')).toBe(0)
  rig.mode = 200
  const served = await rig.h.post(toolCall('search')) // the reset, 200, 500 and 400 kept, then this one: 100 - 5
  expect(remaining(served)).toEqual({ identity: 95 })
})

test('a refund after the window ended takes nothing from the new window', async () => {
  const rig = await startRig({ budget: BUDGET })
  rig.mode = 'stall'
  const first = rig.h.post(toolCall('search', {}, 1))
  await waitFor(() => rig.held.length === 1, { what: 'the upstream to hold the first call' })
  rig.h.advance(61) // every window the first call was charged to has ended

  rig.mode = 200
  const second = await rig.h.post(toolCall('search', {}, 2))
  expect(second.status).toBe(200)
  expect(remaining(second)).toEqual({ tool: 3, tenant: 2, identity: 1 }) // fresh windows, this call only

  answer(rig.held[0].res, 503, rig.held[0].body) // now the first call is refused: refunded, in its old windows
  expect((await first).status).toBe(503)
  expect((await rig.h.audit()).find((e) => e.status === 503)?.reason).toBe('budget refunded: the MCP server answered 503')

  const third = await rig.h.post(toolCall('search', {}, 3))
  expect(third.status).toBe(200)
  expect(remaining(third)).toEqual({ tool: 2, tenant: 1, identity: 0 }) // the new windows kept both charges
  const over = await rig.h.post(toolCall('search', {}, 4))
  expect([over.status, errorCode(over)]).toEqual([429, 429])
})
