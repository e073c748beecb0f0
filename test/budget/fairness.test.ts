/**
 * Budgets that are fair and match what tools cost, seen from outside through a real gateway and the
 * example MCP server: a denied call charges its caller only, cost weights, several windows per bucket,
 * the loop breaker, and counts across a reload. Every rule runs twice: counted in memory, and in a real
 * Postgres (the window clock injected and moved with the harness's). (Refunds: refund.test.ts.)
 */
import type { Pool } from 'pg'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BudgetStore } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { type BudgetHarness, type Reply, startBudgetHarness as startHarness } from './budget-harness'
import { MCP_HEADERS, as, toolCall } from '../helpers/harness'
import { type TestDatabase, closeTestDatabase, openTestDatabase } from '../helpers/postgres'

const errorDataOf = (res: Reply) => (res.json as { error: { data: Record<string, unknown> } }).error.data

type StoreMaker = ((now: () => number) => BudgetStore) | undefined

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(10))
  await migrate(pool, silentLogger())
})

afterAll(() => closeTestDatabase({ db, pool }))

/** A Postgres store whose window clock starts now and moves with the harness's manual clock. */
const postgres: StoreMaker = (now) => {
  const startedMs = Date.now()
  const startedAt = now()
  return new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, clock: () => new Date(startedMs + now() - startedAt) })
}

describe.each([
  ['in memory', undefined],
  ['in Postgres', postgres],
] as Array<[string, StoreMaker]>)('%s', (_label, store) => {
  beforeEach(async () => {
    if (store !== undefined) await pool.query('TRUNCATE budget_buckets')
  })

  const startBudgetHarness = (options: Parameters<typeof startHarness>[0]) => startHarness({ ...options, store })

  let h: BudgetHarness
  afterEach(async () => {
    await h.close()
  })

  const echo = (text = 'hi', id: number | string = 1) => toolCall('echo', { text }, id)
  const expensive = (id: number | string = 1) => toolCall('expensive_tool', {}, id)

  /** The shipped example's shape: guests may not call expensive_tool, which has a small shared budget. */
  const GUEST_POLICY = {
    policy: { default: 'allow', rules: [{ identity: '*', tenant: 'guest', tool: 'expensive_tool', effect: 'deny' }] },
  }

  describe('a call policy denies charges only its caller', () => {
    const budget = {
      requests_per_window: 5,
      window_seconds: 60,
      tenants: { guest: { requests_per_window: 4, window_seconds: 60 }, acme: { requests_per_window: 50, window_seconds: 60 } },
      tools: { expensive_tool: { requests_per_window: 3, window_seconds: 600 } },
    }

    beforeEach(async () => {
      h = await startBudgetHarness({ budget, config: GUEST_POLICY })
    })

    test('forbidden calls do not use up the shared tool budget an allowed caller of another tenant needs', async () => {
      for (let i = 0; i < 3; i++) expect((await h.post(expensive(i), 'mallory', 'guest')).status).toBe(403)
      const allowed = await h.post(expensive(9), 'alice', 'acme')
      expect(allowed.status).toBe(200)
      // The whole tool budget is still there for the allowed caller: its first call left 2 of 3.
      expect(allowed.headers.get('ratelimit')).toBe('"tool";r=2;t=600, "tenant";r=49;t=60, "identity";r=4;t=60')
    })

    test("they charge the caller's own identity bucket, so probing is throttled, and never the tenant's", async () => {
      for (let i = 0; i < 4; i++) expect((await h.post(expensive(i), 'mallory', 'guest')).status).toBe(403)
      // Mallory's 4 denied calls left the guest tenant bucket (4) untouched: another guest gets all of it.
      const other = await h.post(echo('x', 1), 'gina', 'guest')
      expect(other.headers.get('ratelimit')).toBe('"tenant";r=3;t=60, "identity";r=4;t=60')
      expect((await h.post(expensive(5), 'mallory', 'guest')).status).toBe(403) // the fifth of 5
      const sixth = await h.post(expensive(6), 'mallory', 'guest')
      expect(sixth.status).toBe(429) // her own bucket is spent: budget answers before policy
      expect(errorDataOf(sixth).bucket).toBe('identity')
      const entries = (await h.audit()).filter((e) => e.identity === 'mallory')
      expect(entries.map((e) => e.decision)).toEqual(['deny', 'deny', 'deny', 'deny', 'deny', 'throttled'])
    })

    test('a denied call over a shared budget still gets 429, and charges nothing when refused', async () => {
      for (let i = 0; i < 3; i++) expect((await h.post(expensive(i), `user-${i}`, 'acme')).status).toBe(200) // the tool bucket is spent
      const denied = await h.post(expensive(7), 'mallory', 'guest')
      expect(denied.status).toBe(429)
      expect(errorDataOf(denied).bucket).toBe('tool')
      // Refused: nothing charged, not even her identity bucket.
      expect((await h.post(echo(), 'mallory', 'guest')).headers.get('ratelimit')).toBe('"tenant";r=3;t=60, "identity";r=4;t=60')
    })

    test('a batch refused by policy charges the identity bucket for every call in it, and no shared bucket', async () => {
      const res = await h.post([echo('a', 1), expensive(2)], 'mallory', 'guest')
      expect(res.status).toBe(403)
      expect((await h.post(echo(), 'mallory', 'guest')).headers.get('ratelimit')).toBe('"tenant";r=3;t=60, "identity";r=2;t=60')
    })
  })

  describe('cost weights', () => {
    const budget = {
      requests_per_window: 100,
      window_seconds: 60,
      tenants: { acme: { requests_per_window: 1000, window_seconds: 60 } },
      tools: {
        expensive_tool: { requests_per_window: 30, window_seconds: 60, cost: 10 },
        add: { cost: 40 }, // a cost without a bucket of its own
      },
    }

    beforeEach(async () => {
      h = await startBudgetHarness({ budget })
    })

    test('one call charges its cost to every tier it passes, and RateLimit counts units', async () => {
      const res = await h.post(expensive())
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit-policy')).toBe('"tool";q=30;w=60, "tenant";q=1000;w=60, "identity";q=100;w=60')
      expect(res.headers.get('ratelimit')).toBe('"tool";r=20;t=60, "tenant";r=990;t=60, "identity";r=90;t=60')
      const plain = await h.post(echo()) // unlisted: cost 1
      expect(plain.headers.get('ratelimit')).toBe('"tenant";r=989;t=60, "identity";r=89;t=60')
    })

    test('a tool with only a cost has no bucket, but its cost is charged to tenant and identity', async () => {
      const res = await h.post(toolCall('add', { a: 1, b: 2 }))
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBe('"tenant";r=960;t=60, "identity";r=60;t=60')
      expect((await h.post(toolCall('add', { a: 1, b: 2 }))).status).toBe(200)
      const third = await h.post(toolCall('add', { a: 1, b: 2 })) // 80 used: 40 more does not fit in 100
      expect(third.status).toBe(429)
      expect(errorDataOf(third)).toEqual({ retry_after_seconds: 60, bucket: 'identity' })
      expect(third.headers.get('ratelimit')).toBe('"tenant";r=920;t=60, "identity";r=20;t=60')
      expect((await h.audit()).at(-1)?.reason).toBe('rate limit exceeded: identity bucket, 100 units per 60s window')
      expect((await h.post(echo())).status).toBe(200) // 20 units left for cheaper calls
    })

    test('a call whose cost exceeds a limit outright is refused as never admissible, charging nothing', async () => {
      await h.close()
      h = await startBudgetHarness({ budget: { ...budget, requests_per_window: 20 } })
      const res = await h.post(toolCall('add', { a: 1, b: 2 }))
      expect(res.status).toBe(429)
      expect(res.headers.get('retry-after')).toBe('60') // a whole window: waiting cannot help
      expect((await h.audit()).at(-1)?.reason).toBe(
        'rate limit exceeded: call needs 40 units from the identity bucket, which allows 20 per 60s window: it can never be admitted whole',
      )
      expect((await h.post(echo())).headers.get('ratelimit')).toBe('"tenant";r=999;t=60, "identity";r=19;t=60')
    })

    test('a batch charges the sum of its calls’ costs', async () => {
      const res = await h.post([expensive(1), echo('x', 2), expensive(3)])
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBe('"tool";r=10;t=60, "tenant";r=979;t=60, "identity";r=79;t=60')
    })
  })

  describe('several windows per bucket', () => {
    const budget = {
      limits: [
        { requests_per_window: 3, window_seconds: 60 },
        { requests_per_window: 5, window_seconds: 86400 },
      ],
      tenants: { acme: { limits: [{ requests_per_window: 100, window_seconds: 3600 }] } },
      tools: {
        expensive_tool: {
          limits: [
            { requests_per_window: 2, window_seconds: 10 },
            { requests_per_window: 50, window_seconds: 2678400 },
          ],
        },
      },
    }

    beforeEach(async () => {
      h = await startBudgetHarness({ budget })
    })

    test('every window must admit, and the refusal names the window that refused', async () => {
      for (let i = 0; i < 3; i++) expect((await h.post(echo('a', i))).status).toBe(200)
      const perMinute = await h.post(echo('a', 4))
      expect(perMinute.status).toBe(429)
      expect(errorDataOf(perMinute)).toEqual({ retry_after_seconds: 60, bucket: 'identity-60s' })
      h.advance(60.5) // half-way into a second: Postgres adds the µs its checks take to the test clock
      for (let i = 0; i < 2; i++) expect((await h.post(echo('a', i))).status).toBe(200)
      const perDay = await h.post(echo('a', 9))
      expect(perDay.status).toBe(429)
      expect(errorDataOf(perDay)).toEqual({ retry_after_seconds: 86340, bucket: 'identity-86400s' })
      expect(perDay.headers.get('retry-after')).toBe(String(86340))
      expect((await h.audit()).at(-1)?.reason).toBe('rate limit exceeded: identity-86400s bucket, 5 requests per 86400s window')
    })

    test('each window is an item of its own in RateLimit-Policy and RateLimit', async () => {
      const res = await h.post(expensive())
      expect(res.headers.get('ratelimit-policy')).toBe(
        '"tool-10s";q=2;w=10, "tool-2678400s";q=50;w=2678400, "tenant";q=100;w=3600, "identity-60s";q=3;w=60, "identity-86400s";q=5;w=86400',
      )
      expect(res.headers.get('ratelimit')).toBe(
        '"tool-10s";r=1;t=10, "tool-2678400s";r=49;t=2678400, "tenant";r=99;t=3600, "identity-60s";r=2;t=60, "identity-86400s";r=4;t=86400',
      )
    })

    test('a call refused by one window charges none of the others', async () => {
      await h.post(expensive(1), 'alice')
      await h.post(expensive(2), 'bob')
      const refused = await h.post(expensive(3), 'carol') // the tool's 10 s window is full
      expect(refused.status).toBe(429)
      expect(errorDataOf(refused).bucket).toBe('tool-10s')
      h.advance(10.5)
      const res = await h.post(expensive(4), 'carol')
      expect(res.headers.get('ratelimit')).toBe(
        '"tool-10s";r=1;t=10, "tool-2678400s";r=47;t=2678390, "tenant";r=97;t=3590, "identity-60s";r=2;t=60, "identity-86400s";r=4;t=86400',
      )
    })
  })

  describe('the loop breaker', () => {
    const budget = { requests_per_window: 100, window_seconds: 60, repeat_limit: { calls: 2, window_seconds: 30 } }

    beforeEach(async () => {
      h = await startBudgetHarness({ budget })
    })

    async function postText(text: string, identity = 'alice'): Promise<Reply> {
      const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...as(identity), ...MCP_HEADERS }, body: text })
      const body = await res.text()
      return { status: res.status, headers: res.headers, json: body ? JSON.parse(body) : null }
    }

    test('the same identity calling the same tool with the same arguments more than `calls` times is refused', async () => {
      expect((await h.post(echo('same', 1))).status).toBe(200)
      expect((await h.post(echo('same', 2))).status).toBe(200)
      const third = await h.post(echo('same', 3))
      expect(third.status).toBe(429)
      expect(errorDataOf(third)).toEqual({ retry_after_seconds: 30, bucket: 'repeat' })
      expect(third.headers.get('ratelimit-policy')).toBe('"repeat";q=2;w=30, "identity";q=100;w=60')
      expect((await h.audit()).at(-1)).toMatchObject({
        decision: 'throttled',
        status: 429,
        tool: 'echo',
        reason: 'repeated call: "echo" with the same arguments more than 2 times in 30s (budget.repeat_limit)',
      })
      // Refused: it charged nothing, so the identity bucket counted 2 calls.
      const other = await h.post(echo('different', 4))
      expect(other.status).toBe(200)
      expect(other.headers.get('ratelimit')).toBe('"identity";r=97;t=60') // the repeat window is not announced on admitted calls
      expect((await h.post(echo('same', 5), 'bob')).status).toBe(200) // another identity has its own count
      h.advance(30.5)
      expect((await h.post(echo('same', 6))).status).toBe(200) // the window is over
    })

    test('key order, whitespace, string escapes and number spellings do not make a call different', async () => {
      const a = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
      const b =
        '{ "params" : { "arguments" : { "b" : 2 ,\n "a" : 1 } , "name" : "add" } , "method" : "tools/call" , "id" : 2 , "jsonrpc" : "2.0" }'
      const c = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"\\u0061":1,"b":2}}}'
      expect((await postText(a)).status).toBe(200)
      expect((await postText(b)).status).toBe(200)
      expect((await postText(c)).status).toBe(429)
      const spelled = '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add","arguments":{"a":1.0,"b":20e-1}}}'
      expect((await postText(spelled)).status).toBe(429)
      const other = '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":1.5,"b":2}}}'
      expect((await postText(other)).status).toBe(200)
    })

    test('one batch repeating a call counts every repetition', async () => {
      const res = await h.post([echo('loop', 1), echo('loop', 2), echo('loop', 3)])
      expect(res.status).toBe(429)
      expect(errorDataOf(res).bucket).toBe('repeat')
      expect((await h.post([echo('loop', 1), echo('loop', 2)])).status).toBe(200)
    })
  })

  describe('a reload', () => {
    test('keeps the counts of every window whose length is unchanged, restarts the others and says which', async () => {
      const before = {
        requests_per_window: 5,
        window_seconds: 60,
        tools: { expensive_tool: { requests_per_window: 4, window_seconds: 600 } },
        repeat_limit: { calls: 4, window_seconds: 60 },
      }
      h = await startBudgetHarness({ budget: before })
      for (let i = 0; i < 3; i++) await h.post(expensive(i))
      h.reload({
        ...before,
        requests_per_window: 6, // a new limit keeps the count
        tools: { expensive_tool: { requests_per_window: 4, window_seconds: 300 } }, // a new window length restarts
      })
      const res = await h.post(expensive(4))
      expect(res.headers.get('ratelimit')).toBe('"tool";r=3;t=300, "identity";r=2;t=60')
      // The repeat window kept its count too: the fourth identical call passes, the fifth does not.
      expect(res.status).toBe(200)
      const fifth = await h.post(expensive(5))
      expect(fifth.status).toBe(429)
      expect(errorDataOf(fifth).bucket).toBe('repeat')
      const line = h.logs.find((l) => /start counting afresh/.test(l.message))
      expect(line).toMatchObject({ level: 'warn', buckets: ['tool "expensive_tool": new 300s window, 600s window removed'] })
    })
  })
})
