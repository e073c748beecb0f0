/**
 * Budget enforcement seen from outside: a real gateway between fetch and the example MCP server,
 * counting in a real MemoryBudgetStore whose clock the tests move.
 */
import { type BudgetHarness, type Reply, startBudgetHarness } from './budget-harness'
import { rpc, toolCall } from '../helpers/harness'

/** The error data of a throttled call's JSON-RPC answer. */
const errorDataOf = (res: Reply) => (res.json as { error: { data: { bucket: string; retry_after_seconds: number } } }).error.data

const EXAMPLE_BUDGET = {
  requests_per_window: 3,
  window_seconds: 60,
  tenants: { acme: { requests_per_window: 5, window_seconds: 60 } },
  tools: { expensive_tool: { requests_per_window: 2, window_seconds: 30 } },
}

let h: BudgetHarness
afterEach(async () => {
  await h.close()
})

const echo = (id: number | string = 1) => toolCall('echo', { text: 'hi' }, id)
const expensive = (id: number | string = 1) => toolCall('expensive_tool', {}, id)

describe('a throttled call', () => {
  beforeEach(async () => {
    h = await startBudgetHarness({ budget: EXAMPLE_BUDGET })
  })

  test('gets a 429 with Retry-After, no-store, the RateLimit fields and a JSON-RPC error echoing its id', async () => {
    for (let i = 0; i < 3; i++) expect((await h.post(echo(i))).status).toBe(200)
    h.advance(13)
    const res = await h.post(echo('call-4'))
    expect(res.status).toBe(429)
    expect(res.headers.get('retry-after')).toBe('47')
    expect(res.headers.get('cache-control')).toBe('no-store')
    expect(res.headers.get('content-type')).toBe('application/json')
    expect(res.headers.get('mcp-session-id')).toBeNull()
    expect(res.headers.get('ratelimit-policy')).toBe('"tenant";q=5;w=60, "identity";q=3;w=60')
    expect(res.headers.get('ratelimit')).toBe('"tenant";r=2;t=47, "identity";r=0;t=47')
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: 'call-4',
      error: { code: 429, message: 'Rate limit exceeded', data: { retry_after_seconds: 47, bucket: 'identity' } },
    })
  })

  test('is audited as throttled with the refusing bucket, its limit and window, and the tool', async () => {
    for (let i = 0; i < 4; i++) await h.post(echo(i))
    const entries = await h.audit()
    expect(entries.map((e) => e.decision)).toEqual(['allow', 'allow', 'allow', 'throttled'])
    expect(entries[0].reason).toBeUndefined() // an ordinary allow has an empty reason
    expect(entries[3]).toMatchObject({
      identity: 'alice',
      tenant: 'acme',
      method: 'tools/call',
      tool: 'echo',
      status: 429,
      reason: 'rate limit exceeded: identity bucket, 3 requests per 60s window',
    })
  })

  test('names the tool bucket when the tool ran out first, with the tool window in Retry-After', async () => {
    await h.post(expensive(1), 'alice')
    await h.post(expensive(2), 'bob')
    const res = await h.post(expensive(3), 'carol')
    expect(res.status).toBe(429)
    expect(errorDataOf(res)).toEqual({ retry_after_seconds: 30, bucket: 'tool' })
    expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=2;w=30, "tenant";q=5;w=60, "identity";q=3;w=60')
    expect((await h.audit()).at(-1)).toMatchObject({
      identity: 'carol',
      tool: 'expensive_tool',
      reason: 'rate limit exceeded: tool bucket, 2 requests per 30s window',
    })
  })

  test('Retry-After is whole seconds rounded up, and at least 1', async () => {
    for (let i = 0; i < 3; i++) await h.post(echo(i))
    h.advance(59.6)
    const res = await h.post(echo())
    expect(res.headers.get('retry-after')).toBe('1')
    expect(errorDataOf(res).retry_after_seconds).toBe(1)
  })
})

describe('an admitted call', () => {
  beforeEach(async () => {
    h = await startBudgetHarness({ budget: EXAMPLE_BUDGET })
  })

  test('is forwarded with the remaining counts of every bucket that applies', async () => {
    const res = await h.post(expensive())
    expect(res.status).toBe(200)
    expect((res.json as { result: { content: Array<{ text: string }> } }).result.content[0].text).toBe('expensive result')
    expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=2;w=30, "tenant";q=5;w=60, "identity";q=3;w=60')
    expect(res.headers.get('ratelimit')).toBe('"tool";r=1;t=30, "tenant";r=4;t=60, "identity";r=2;t=60')
  })

  test('of an unlisted tenant and an unlisted tool is checked against its identity bucket only', async () => {
    const res = await h.post(echo(), 'dave', 'globex')
    expect(res.headers.get('ratelimit-policy')).toBe('"identity";q=3;w=60')
    expect(res.headers.get('ratelimit')).toBe('"identity";r=2;t=60')
  })

  test('methods other than tools/call are neither counted nor given RateLimit fields', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await h.post(rpc('tools/list', {}, i))
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBeNull()
    }
    expect((await h.post(rpc('ping', undefined, 9))).status).toBe(200)
    expect((await h.post(echo())).headers.get('ratelimit')).toBe('"tenant";r=4;t=60, "identity";r=2;t=60')
  })
})

describe('buckets', () => {
  beforeEach(async () => {
    h = await startBudgetHarness({ budget: EXAMPLE_BUDGET })
  })

  test('a tenant bucket is shared: once it is spent, its other identities are throttled too, other tenants are not', async () => {
    for (const who of ['alice', 'alice', 'alice', 'bob', 'bob']) expect((await h.post(echo(), who)).status).toBe(200)
    const carol = await h.post(echo(), 'carol')
    expect(carol.status).toBe(429)
    expect(errorDataOf(carol).bucket).toBe('tenant')
    expect((await h.post(echo(), 'carol', 'globex')).status).toBe(200)
  })

  test('a tool bucket is shared by every caller of that tool, whatever their tenant', async () => {
    expect((await h.post(expensive(), 'alice', 'acme')).status).toBe(200)
    expect((await h.post(expensive(), 'zed', 'globex')).status).toBe(200)
    expect((await h.post(expensive(), 'yan', 'initech')).status).toBe(429)
    expect((await h.post(echo(), 'yan', 'initech')).status).toBe(200) // other tools are not held back
  })

  test('the same identity name in two tenants has two independent buckets', async () => {
    for (let i = 0; i < 3; i++) await h.post(echo(), 'alice', 'globex')
    expect((await h.post(echo(), 'alice', 'globex')).status).toBe(429)
    expect((await h.post(echo(), 'alice', 'initech')).status).toBe(200)
  })

  test('a call refused by the identity bucket leaves the tool and tenant counts untouched', async () => {
    h = await restart({ ...EXAMPLE_BUDGET, requests_per_window: 1 })
    expect((await h.post(expensive(), 'alice')).headers.get('ratelimit')).toBe('"tool";r=1;t=30, "tenant";r=4;t=60, "identity";r=0;t=60')
    const refused = await h.post(expensive(), 'alice')
    expect(refused.status).toBe(429)
    expect(errorDataOf(refused).bucket).toBe('identity')
    expect(refused.headers.get('ratelimit')).toBe('"tool";r=1;t=30, "tenant";r=4;t=60, "identity";r=0;t=60')
    expect((await h.post(expensive(), 'bob')).headers.get('ratelimit')).toBe('"tool";r=0;t=30, "tenant";r=3;t=60, "identity";r=0;t=60')
  })

  test('a window reopens after window_seconds from its first call, and Retry-After said when', async () => {
    for (let i = 0; i < 3; i++) await h.post(echo(), 'alice', 'globex')
    h.advance(20)
    const refused = await h.post(echo(), 'alice', 'globex')
    expect(refused.headers.get('retry-after')).toBe('40')
    h.advance(40)
    const res = await h.post(echo(), 'alice', 'globex')
    expect(res.status).toBe(200)
    expect(res.headers.get('ratelimit')).toBe('"identity";r=2;t=60')
  })
})

describe('batches', () => {
  beforeEach(async () => {
    h = await startBudgetHarness({ budget: { ...EXAMPLE_BUDGET, requests_per_window: 4 } })
  })

  test('each tools/call element counts and the batch is charged together', async () => {
    const res = await h.post([echo(1), rpc('tools/list', {}, 2), expensive(3), expensive(4)])
    expect(res.status).toBe(200)
    expect((res.json as Array<{ id: number }>).map((r) => r.id)).toEqual([1, 2, 3, 4])
    expect(res.headers.get('ratelimit')).toBe('"tool";r=0;t=30, "tenant";r=2;t=60, "identity";r=1;t=60')
  })

  test('a batch that does not fit is refused whole with id null, and charges nothing', async () => {
    await h.post([echo(1), echo(2), echo(3)])
    const res = await h.post([echo(4), rpc('tools/list', {}, 5), echo(6)])
    expect(res.status).toBe(429)
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: 429, message: 'Rate limit exceeded', data: { retry_after_seconds: 60, bucket: 'identity' } },
    })
    expect((await h.post(echo(7))).status).toBe(200) // the last slot is still there
    const entries = (await h.audit()).slice(3) // after the first batch's three entries
    expect(entries.map((e) => [e.method, e.decision])).toEqual([
      ['tools/call,tools/list', 'throttled'], // one entry for the refused batch
      ['tools/call', 'allow'],
    ])
  })

  test('a batch calling a listed tool more often than its whole limit is refused as never admissible, charging nothing', async () => {
    expect((await h.post(echo(0))).status).toBe(200) // opens the windows
    h.advance(20)
    const res = await h.post([expensive(1), expensive(2), expensive(3)])
    expect(res.status).toBe(429)
    expect(errorDataOf(res)).toEqual({ bucket: 'tool', retry_after_seconds: 30 }) // a whole window: sooner cannot help
    expect(res.headers.get('retry-after')).toBe('30')
    expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=2;w=30, "tenant";q=5;w=60, "identity";q=4;w=60')
    const entries = (await h.audit()).slice(-1) // one entry for the refused batch
    expect(entries.map((e) => e.reason)).toEqual(
      Array(1).fill(
        'rate limit exceeded: batch needs 3 requests from the tool bucket, which allows 2 per 30s window: it can never be admitted whole',
      ),
    )
    expect((await h.post(expensive(4))).status).toBe(200)
    expect((await h.post(expensive(5))).status).toBe(200) // both slots were still there
  })
})

test('a batch calling two listed tools names one "tool" item, the tightest, so every item name stays unique', async () => {
  const tools = { expensive_tool: { requests_per_window: 2, window_seconds: 30 }, echo: { requests_per_window: 5, window_seconds: 60 } }
  h = await startBudgetHarness({ budget: { requests_per_window: 10, window_seconds: 60, tools } })
  const res = await h.post([echo(1), expensive(2)]) // echo: 4 left of 5, expensive_tool: 1 left of 2
  expect(res.status).toBe(200)
  expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=2;w=30, "identity";q=10;w=60')
  expect(res.headers.get('ratelimit')).toBe('"tool";r=1;t=30, "identity";r=8;t=60')
  const next = await h.post([echo(3), echo(4), echo(5), echo(6), toolCall('whoami', {}, 7)]) // echo: 0 left
  expect(next.headers.get('ratelimit-policy')).toBe('"tool";q=5;w=60, "identity";q=10;w=60')
  expect(next.headers.get('ratelimit')).toBe('"tool";r=0;t=60, "identity";r=3;t=60')
})

test('on a 429 the "tool" item is the bucket that refused, even when another tool has fewer left', async () => {
  const tools = { echo: { requests_per_window: 5, window_seconds: 60 }, whoami: { requests_per_window: 2, window_seconds: 30 } }
  h = await startBudgetHarness({ budget: { requests_per_window: 100, window_seconds: 60, tools } })
  const whoami = (id: number) => toolCall('whoami', {}, id)
  expect((await h.post([echo(1), echo(2), echo(3), whoami(4)])).status).toBe(200) // echo: 2 left, whoami: 1 left
  const res = await h.post([echo(5), echo(6), echo(7), whoami(8)]) // echo needs 3 of its 2: refused
  expect(res.status).toBe(429)
  expect(errorDataOf(res)).toEqual({ bucket: 'tool', retry_after_seconds: 60 })
  expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=5;w=60, "identity";q=100;w=60')
  expect(res.headers.get('ratelimit')).toBe('"tool";r=2;t=60, "identity";r=96;t=60')
})

describe('exactness under load', () => {
  test('50 concurrent callers against a limit of 10 get exactly 10 answers from the MCP server', async () => {
    h = await startBudgetHarness({
      budget: { requests_per_window: 100, tools: { expensive_tool: { requests_per_window: 10, window_seconds: 60 } } },
    })
    const statuses = await Promise.all(Array.from({ length: 50 }, (_, i) => h.post(expensive(i), `user-${i}`).then((r) => r.status)))
    expect(statuses.filter((s) => s === 200)).toHaveLength(10)
    expect(statuses.filter((s) => s === 429)).toHaveLength(40)
  })

  test('an overload of 5× the limit over several windows admits exactly limit × windows, as the audit trail shows', async () => {
    const limit = 6
    const windows = 4
    h = await startBudgetHarness({ budget: { requests_per_window: limit, window_seconds: 2 } })
    let admitted = 0
    for (let w = 0; w < windows; w++) {
      const statuses = await Promise.all(Array.from({ length: limit * 5 }, (_, i) => h.post(echo(i)).then((r) => r.status)))
      admitted += statuses.filter((s) => s === 200).length
      expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([])
      h.advance(2)
    }
    expect(admitted).toBe(limit * windows)
    const entries = await h.audit()
    expect(entries.filter((e) => e.decision === 'allow')).toHaveLength(limit * windows)
    expect(entries.filter((e) => e.decision === 'throttled')).toHaveLength(limit * windows * 4)
  })
})

async function restart(budget: Record<string, unknown>): Promise<BudgetHarness> {
  await h.close()
  return startBudgetHarness({ budget })
}
