/**
 * Attacks on fair budgets (denied calls charge the caller only, refunds of unserved calls, cost
 * weights, several windows per bucket, the loop breaker, reloads that keep counts), through a real
 * gateway and real HTTP: each test is an attack that must stay defended. Three of them found defects
 * when first written (a long tool name that failed the Postgres check open, repeat keys that held
 * whole tool names, duplicate argument names that evaded the loop breaker).
 */
import { randomBytes } from 'node:crypto'
import type { Pool } from 'pg'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { AdmitResult, BucketCharge, BudgetStore } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { MCP_HEADERS, as, configProblems, toolCall } from '../helpers/harness'
import { type TestDatabase, closeTestDatabase, openTestDatabase } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'
import type { Reply } from './budget-harness'
import { answer, closeRigs, remaining, startRig } from './upstream-rig'

afterEach(closeRigs)

const bucketOf = (r: Reply) => (r.json as { error?: { data?: { bucket?: string } } } | null)?.error?.data?.bucket

/** POSTs raw text (bodies JSON.stringify cannot write: duplicate keys, odd spacing) to `path`. */
async function postRaw(url: string, text: string, identity = 'alice', tenant = 'acme', path = '/mcp'): Promise<Reply> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { ...as(identity, tenant), ...MCP_HEADERS }, body: text })
  const body = await res.text()
  let json: unknown
  try {
    json = body ? (JSON.parse(body) as unknown) : null
  } catch {
    json = body
  }
  return { status: res.status, headers: res.headers, json }
}

function rawCall(name: string, argsText: string | null, id: number | string | null = 1): string {
  const idPart = id === null ? '' : `"id":${JSON.stringify(id)},`
  const args = argsText === null ? '' : `,"arguments":${argsText}`
  return `{"jsonrpc":"2.0",${idPart}"method":"tools/call","params":{"name":${JSON.stringify(name)}${args}}}`
}

/** A store that records the longest key it was asked to admit (the memory a bucket holds grows with it). */
class KeyLengthProbe implements BudgetStore {
  longestKey = 0
  constructor(private readonly inner: MemoryBudgetStore) {}
  admitNow(charges: readonly BucketCharge[]): AdmitResult {
    for (const c of charges) this.longestKey = Math.max(this.longestKey, c.key.length)
    return this.inner.admitNow(charges)
  }
  admit(charges: readonly BucketCharge[]): Promise<AdmitResult> {
    return Promise.resolve(this.admitNow(charges))
  }
  refund(charges: readonly BucketCharge[], result: AdmitResult): Promise<void> {
    return this.inner.refund(charges, result)
  }
  close(): Promise<void> {
    return this.inner.close()
  }
}

// ---------------------------------------------------------------------------------------------------
describe('denied calls and batches', () => {
  const BUDGET = {
    requests_per_window: 10,
    window_seconds: 60,
    tenants: { acme: { requests_per_window: 5, window_seconds: 60 } },
    tools: { search: { requests_per_window: 2, window_seconds: 60 } },
  }
  const POLICY = {
    policy: {
      default: 'allow',
      rules: [
        { identity: '*', tenant: '*', tool: 'forbidden', effect: 'deny' },
        { identity: '*', tenant: 'guest', tool: 'search', effect: 'deny' },
      ],
    },
  }

  test('a batch mixing a denied call with allowed calls of a shared tool: 403, only the caller identity pays', async () => {
    const rig = await startRig({ budget: BUDGET, config: POLICY })
    const batch = [toolCall('search', {}, 1), toolCall('search', {}, 2), toolCall('forbidden', {}, 3)]
    const denied = await rig.h.post(batch, 'alice')
    expect(denied.status).toBe(403)
    expect(rig.upstream.seen).toHaveLength(0)
    // bob, same tenant: the tool (2) and tenant (5) buckets are untouched by alice's denied batch.
    const bob = await rig.h.post(toolCall('search'), 'bob')
    expect(bob.status).toBe(200)
    expect(remaining(bob)).toEqual({ tool: 1, tenant: 4, identity: 9 })
    // alice paid 3 units of her own identity bucket for the denied batch.
    const alice = await rig.h.post(toolCall('other'), 'alice')
    expect(remaining(alice)).toEqual({ tenant: 3, identity: 6 })
  })

  test('a denied caller cannot drain a full shared tool bucket further: 429, and nothing is charged', async () => {
    const rig = await startRig({ budget: BUDGET, config: POLICY })
    for (const id of [1, 2]) expect((await rig.h.post(toolCall('search', {}, id), 'bob')).status).toBe(200)
    const eve = await rig.h.post(toolCall('search'), 'eve', 'guest')
    expect([eve.status, bucketOf(eve)]).toEqual([429, 'tool'])
    const again = await rig.h.post(toolCall('other'), 'eve', 'guest')
    expect(remaining(again)).toEqual({ identity: 9 }) // the 429 took nothing from eve either
  })

  test('a denied call whose cost can never fit: 429 "never", nothing charged, nothing forwarded', async () => {
    const rig = await startRig({
      budget: { ...BUDGET, tools: { forbidden: { cost: 1_000_000 } }, requests_per_window: 1000 },
      config: POLICY,
    })
    const r = await rig.h.post(toolCall('forbidden'))
    expect([r.status, bucketOf(r)]).toEqual([429, 'tenant'])
    expect(rig.upstream.seen).toHaveLength(0)
    expect(remaining(await rig.h.post(toolCall('other')))).toEqual({ tenant: 4, identity: 999 })
  })

  test('duplicate tools in a batch are summed per bucket: one call over the tool limit refuses the whole batch, charging nothing', async () => {
    const rig = await startRig({ budget: BUDGET })
    const batch = [1, 2, 3].map((id) => toolCall('search', {}, id))
    const r = await rig.h.post(batch)
    expect([r.status, bucketOf(r)]).toEqual([429, 'tool'])
    expect(rig.upstream.seen).toHaveLength(0)
    expect(remaining(await rig.h.post(toolCall('search')))).toEqual({ tool: 1, tenant: 4, identity: 9 })
  })

  test('huge costs times a big batch neither overflow nor crash: refused whole, then a single call is admitted', async () => {
    const rig = await startRig({
      budget: { requests_per_window: 1_000_000_000, window_seconds: 60, tools: { big: { cost: 1_000_000 } } },
      config: { max_batch_messages: 10_000 },
    })
    const batch = Array.from({ length: 2000 }, (_, i) => toolCall('big', {}, i)) // 2e9 units
    const r = await rig.h.post(batch)
    expect([r.status, bucketOf(r)]).toEqual([429, 'identity'])
    const one = await rig.h.post(toolCall('big'))
    expect(one.status).toBe(200)
    expect(remaining(one)).toEqual({ identity: 999_000_000 })
  })

  test('a tools/call notification (no id) is counted like any call; refused, it gets 429 and no body', async () => {
    const rig = await startRig({ budget: { requests_per_window: 1, window_seconds: 60 } })
    rig.mode = 202
    expect((await postRaw(rig.h.url, rawCall('search', '{}', null))).status).toBe(202)
    const second = await postRaw(rig.h.url, rawCall('search', '{}', null))
    expect([second.status, second.json]).toEqual([429, null])
    expect(rig.upstream.seen).toHaveLength(1)
    expect((await rig.h.audit()).map((e) => e.decision)).toEqual(['allow', 'throttled'])
  })
})

// ---------------------------------------------------------------------------------------------------
describe('the loop breaker', () => {
  const BUDGET = { requests_per_window: 100, window_seconds: 60, repeat_limit: { calls: 1, window_seconds: 60 } }

  test('spellings of one JSON value (key order, whitespace, escapes, absent vs {}) are one call', async () => {
    const rig = await startRig({ budget: BUDGET })
    expect((await postRaw(rig.h.url, rawCall('t', '{"a":1,"b":"x/y"}'))).status).toBe(200)
    for (const args of ['{ "b" : "x\\/y", "a" : 1 }', '{"\\u0062":"\\u0078/y","a":1}']) {
      const r = await postRaw(rig.h.url, rawCall('t', args))
      expect([r.status, bucketOf(r)]).toEqual([429, 'repeat'])
    }
    expect((await postRaw(rig.h.url, rawCall('u', null))).status).toBe(200)
    expect((await postRaw(rig.h.url, rawCall('u', '{}'))).status).toBe(429)
  })

  test('values an upstream could tell apart are not merged (big integers, 1 vs 1.00000000000000001, nested order)', async () => {
    const rig = await startRig({ budget: BUDGET })
    for (const args of [
      '{"n":1}',
      '{"n":1.00000000000000001}',
      '{"n":12345678901234567890}',
      '{"n":12345678901234567891}',
      '{"n":[1,2]}',
      '{"n":[2,1]}',
    ]) {
      expect((await postRaw(rig.h.url, rawCall('t', args))).status).toBe(200)
    }
  })

  test('spellings of one number (1, 1.0, 1e0, 10e-1) and whitespace padding past 64 KiB do not evade it (issue 24, item 11)', async () => {
    const rig = await startRig({ budget: BUDGET })
    const blob = 'x'.repeat(100 * 1024)
    expect((await postRaw(rig.h.url, rawCall('t', `{"n":1,"q":"${blob}"}`))).status).toBe(200)
    const pad = ' '.repeat(70 * 1024)
    for (const args of [
      `{"n":1.0,"q":"${blob}"}`,
      `{"q":"${blob}","n":1e0}`,
      `{"n":10e-1,"q":"${blob}"}`,
      `{${pad}"n"${pad}:${pad}1${pad},"q":"${blob}"${pad}}`,
      `{"n":0.1E1,${pad}"q":"${blob}"}`,
    ]) {
      const r = await postRaw(rig.h.url, rawCall('t', args))
      expect([r.status, bucketOf(r)]).toEqual([429, 'repeat'])
    }
    expect(rig.upstream.seen).toHaveLength(1)
  })

  test('a denied call is judged by the loop breaker but never fills its repeat bucket', async () => {
    const rig = await startRig({
      budget: BUDGET,
      config: { policy: { default: 'allow', rules: [{ identity: 'eve', tenant: '*', tool: 't', effect: 'deny' }] } },
    })
    for (let i = 0; i < 3; i++) expect((await rig.h.post(toolCall('t', {}, i), 'eve')).status).toBe(403)
  })

  test('duplicate member names inside arguments do not evade the loop breaker: counted as the upstream reads them (last wins)', async () => {
    const rig = await startRig({ budget: BUDGET })
    // JSON.parse (and Go, Python) keep the last of duplicate names: the upstream sees {"q":"x"} each time.
    const spellings = ['{"q":"x"}', '{"q":"junk-1","q":"x"}', '{"q":"junk-2","q":"x"}']
    const statuses: number[] = []
    for (const args of spellings) statuses.push((await postRaw(rig.h.url, rawCall('t', args))).status)
    const upstreamSaw = rig.upstream.seen.map((s) => JSON.stringify((JSON.parse(s.body) as { params: unknown }).params))
    expect(new Set(upstreamSaw).size).toBe(1) // proof: one and the same call as the upstream reads it
    // Correct: the repeats are refused (429), or the ambiguous arguments are refused (400) as the
    // scanner already does for duplicate names in the envelope and params.
    expect(statuses.slice(1).every((s) => s !== 200)).toBe(true)
  })

  test('a repeat bucket key stays small whatever tool name the caller sends (memory bounded)', async () => {
    const probe = new KeyLengthProbe(new MemoryBudgetStore())
    const rig = await startRig({ budget: BUDGET, store: probe })
    const name = 'x'.repeat(1024 * 1024) // 1 MiB tool name; kept for the whole repeat window after the call
    expect((await rig.h.post(toolCall(name))).status).toBe(200)
    expect(probe.longestKey).toBeLessThan(1024)
  })
})

// ---------------------------------------------------------------------------------------------------
describe('refunds', () => {
  const BUDGET = {
    requests_per_window: 3,
    window_seconds: 60,
    tools: { search: { requests_per_window: 5, window_seconds: 60, cost: 1 } },
  }

  test('an upstream 429 on an SSE answer is refunded (the status decides, as documented)', async () => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = '429-sse'
    for (let i = 0; i < 4; i++) {
      const r = await postRaw(rig.h.url, JSON.stringify(toolCall('search', {}, i)))
      expect(r.status).toBe(429)
      expect(remaining(r)).toEqual({ tool: 5, identity: 3 })
    }
  })

  test('a 200 SSE answer carrying a JSON-RPC error coded 429 is served: not refunded', async () => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = '200-sse-error'
    for (let i = 0; i < 3; i++) expect((await postRaw(rig.h.url, JSON.stringify(toolCall('search', {}, i)))).status).toBe(200)
    expect((await postRaw(rig.h.url, JSON.stringify(toolCall('search', {}, 9)))).status).toBe(429) // the gateway's own throttle
  })

  test('legacy SSE transport: POST /messages?sessionId= is charged, and the upstream 202 is not refunded', async () => {
    const rig = await startRig({ budget: BUDGET })
    rig.mode = 202
    for (let i = 0; i < 3; i++)
      expect((await postRaw(rig.h.url, rawCall('search', '{}', i), 'alice', 'acme', '/messages?sessionId=s1')).status).toBe(202)
    const over = await postRaw(rig.h.url, rawCall('search', '{}', 9), 'alice', 'acme', '/messages?sessionId=s1')
    expect(over.status).toBe(429)
    expect(rig.upstream.seen).toHaveLength(3)
  })

  test('a reload mid-flight that changes the cost refunds what the call was charged, not the new cost', async () => {
    const rig = await startRig({ budget: { requests_per_window: 20, window_seconds: 60, tools: { search: { cost: 10 } } } })
    rig.mode = 'stall'
    const pending = rig.h.post(toolCall('search'))
    await waitFor(() => rig.held.length === 1, { what: 'the upstream to hold the call' })
    rig.h.reload({ requests_per_window: 20, window_seconds: 60, tools: { search: { cost: 1 } } })
    answer(rig.held[0].res, 503, rig.held[0].body)
    expect((await pending).status).toBe(503)
    rig.mode = 200
    expect(remaining(await rig.h.post(toolCall('search')))).toEqual({ identity: 19 })
  })

  test('a reload mid-flight that changes the window length: the old call refunds its old window, the new window is untouched', async () => {
    const rig = await startRig({ budget: { requests_per_window: 3, window_seconds: 60 } })
    rig.mode = 'stall'
    const pending = rig.h.post(toolCall('search'))
    await waitFor(() => rig.held.length === 1, { what: 'the upstream to hold the call' })
    rig.h.reload({ requests_per_window: 3, window_seconds: 120 })
    rig.mode = 200
    expect(remaining(await rig.h.post(toolCall('search', {}, 2)))).toEqual({ identity: 2 })
    answer(rig.held[0].res, 503, rig.held[0].body)
    expect((await pending).status).toBe(503)
    expect(remaining(await rig.h.post(toolCall('search', {}, 3)))).toEqual({ identity: 1 }) // not 2: no refund into the new window
  })

  test('a refund that arrives after its window ended leaves the new window alone (window boundary race)', async () => {
    const rig = await startRig({ budget: { requests_per_window: 2, window_seconds: 60 } })
    rig.mode = 'stall'
    const pending = rig.h.post(toolCall('search'))
    await waitFor(() => rig.held.length === 1, { what: 'the upstream to hold the call' })
    rig.h.advance(61)
    rig.mode = 200
    expect(remaining(await rig.h.post(toolCall('search', {}, 2)))).toEqual({ identity: 1 })
    answer(rig.held[0].res, 429, rig.held[0].body)
    expect((await pending).status).toBe(429)
    expect(remaining(await rig.h.post(toolCall('search', {}, 3)))).toEqual({ identity: 0 })
  })

  test('a client that leaves after its call was sent is not refunded', async () => {
    const rig = await startRig({ budget: { requests_per_window: 2, window_seconds: 60 } })
    rig.mode = 'stall'
    const ac = new AbortController()
    const pending = fetch(`${rig.h.url}/mcp`, {
      method: 'POST',
      headers: { ...as('alice', 'acme'), ...MCP_HEADERS },
      body: JSON.stringify(toolCall('search')),
      signal: ac.signal,
    }).catch(() => null)
    await waitFor(() => rig.held.length === 1, { what: 'the upstream to hold the call' })
    ac.abort()
    await pending
    await waitFor(async () => (await rig.h.audit()).length === 1, { what: 'the audit entry' })
    rig.mode = 200
    expect(remaining(await rig.h.post(toolCall('search', {}, 2)))).toEqual({ identity: 0 })
  })
})

// ---------------------------------------------------------------------------------------------------
describe('keys and config edges', () => {
  test('names built to collide after concatenation stay distinct buckets', async () => {
    const rig = await startRig({ budget: { requests_per_window: 1, window_seconds: 60, repeat_limit: { calls: 1, window_seconds: 60 } } })
    expect((await rig.h.post(toolCall('t'), 'c', 'a","b')).status).toBe(200)
    expect((await rig.h.post(toolCall('t'), 'b","c', 'a')).status).toBe(200)
    expect((await rig.h.post(toolCall('t'), 'b', 'a,c')).status).toBe(200)
    expect((await rig.h.post(toolCall('t'), 'a,b', 'c')).status).toBe(200)
  })

  test('tools named __proto__ and constructor get exactly their own buckets', async () => {
    const rig = await startRig({
      budget: {
        requests_per_window: 100,
        window_seconds: 60,
        tools: JSON.parse('{"__proto__":{"requests_per_window":1,"window_seconds":60},"constructor":{"cost":7}}') as Record<
          string,
          unknown
        >,
      },
    })
    expect((await rig.h.post(toolCall('__proto__'))).status).toBe(200)
    expect((await rig.h.post(toolCall('__proto__', {}, 2))).status).toBe(429)
    expect(remaining(await rig.h.post(toolCall('constructor')))).toEqual({ identity: 92 })
    expect(remaining(await rig.h.post(toolCall('toString')))).toEqual({ identity: 91 })
  })

  test('limits: 8 windows and 2678400 s are accepted; 9 windows, 2678401 s, duplicates and NaN are refused', () => {
    const eight = Array.from(
      { length: 8 },
      (_, i) => `    - { requests_per_window: 10, window_seconds: ${i === 7 ? 2678400 : (i + 1) / 4} }`,
    ).join('\n')
    expect(configProblems(`upstream: http://x\nauth: { mode: header }\nbudget:\n  limits:\n${eight}\n`)).toEqual([])
    const nine = Array.from({ length: 9 }, (_, i) => `    - { requests_per_window: 10, window_seconds: ${i + 1} }`).join('\n')
    expect(configProblems(`upstream: http://x\nauth: { mode: header }\nbudget:\n  limits:\n${nine}\n`).join('\n')).toMatch(
      /at most 8 windows/,
    )
    expect(configProblems('upstream: http://x\nauth: { mode: header }\nbudget:\n  window_seconds: 2678401\n')).not.toEqual([])
    expect(configProblems('upstream: http://x\nauth: { mode: header }\nbudget:\n  window_seconds: .nan\n')).not.toEqual([])
    expect(
      configProblems(
        'upstream: http://x\nauth: { mode: header }\nbudget:\n  limits: [{requests_per_window: 1, window_seconds: 60}, {requests_per_window: 2, window_seconds: 60.0}]\n',
      ),
    ).not.toEqual([])
  })

  test('several fractional windows: each resets on its own', async () => {
    const rig = await startRig({
      budget: {
        limits: [
          { requests_per_window: 1, window_seconds: 0.5 },
          { requests_per_window: 2, window_seconds: 1.5 },
        ],
      },
    })
    expect((await rig.h.post(toolCall('t', {}, 1))).status).toBe(200)
    const r = await rig.h.post(toolCall('t', {}, 2))
    expect([r.status, bucketOf(r)]).toEqual([429, 'identity-0.5s'])
    rig.h.advance(0.6)
    expect((await rig.h.post(toolCall('t', {}, 3))).status).toBe(200)
    rig.h.advance(0.6)
    const r2 = await rig.h.post(toolCall('t', {}, 4))
    expect([r2.status, bucketOf(r2)]).toEqual([429, 'identity-1.5s'])
  })
})

// ---------------------------------------------------------------------------------------------------
describe('in Postgres', () => {
  let db: TestDatabase
  let pool: Pool
  beforeAll(async () => {
    ;({ db, pool } = await openTestDatabase(10))
    await migrate(pool, silentLogger())
  })
  afterAll(() => closeTestDatabase({ db, pool }))
  beforeEach(async () => {
    await pool.query('TRUNCATE budget_buckets')
  })
  const store = (): BudgetStore => new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })

  test('a tool name too long for the key index does not fail the check open: a real call batched with it is still throttled', async () => {
    const rig = await startRig({
      budget: { requests_per_window: 1, window_seconds: 60, repeat_limit: { calls: 5, window_seconds: 60 } },
      store: store(),
    })
    expect((await rig.h.post(toolCall('search', {}, 1))).status).toBe(200) // alice's whole budget
    const junk = randomBytes(3000).toString('base64') // incompressible: ~4 KB, over btree's 2704-byte row limit
    const batch = [toolCall('search', {}, 2), toolCall(junk, {}, 3)]
    const r = await rig.h.post(batch)
    const last = (await rig.h.audit()).at(-1)
    // The caller is over budget: 429 (the long name once made the check fail open and admitted the batch).
    expect(r.status).toBe(429)
    expect(last?.reason ?? '').toMatch(/rate limit exceeded/)
  })

  test('a 31-day window charges and refunds in Postgres', async () => {
    const rig = await startRig({ budget: { requests_per_window: 2, window_seconds: 2678400 }, store: store() })
    rig.mode = 503
    expect(remaining(await rig.h.post(toolCall('t', {}, 1)))).toEqual({ identity: 2 })
    rig.mode = 200
    const ok = await rig.h.post(toolCall('t', {}, 2))
    expect(remaining(ok)).toEqual({ identity: 1 })
    expect(ok.headers.get('ratelimit-policy')).toBe('"identity";q=2;w=2678400')
  })

  test('8 windows with fractional lengths are one statement and stay exact', async () => {
    const limits = Array.from({ length: 8 }, (_, i) => ({ requests_per_window: 3 + i, window_seconds: 0.25 * (i + 1) + 100 }))
    const rig = await startRig({ budget: { limits }, store: store() })
    for (let i = 0; i < 3; i++) expect((await rig.h.post(toolCall('t', {}, i))).status).toBe(200)
    const r = await rig.h.post(toolCall('t', {}, 9))
    expect([r.status, bucketOf(r)]).toEqual([429, 'identity-100.25s'])
  })

  test('huge cost times a big batch is clamped, not an integer overflow that fails open', async () => {
    const rig = await startRig({
      budget: { requests_per_window: 1_000_000_000, window_seconds: 60, tools: { big: { cost: 1_000_000 } } },
      config: { max_batch_messages: 10_000 },
      store: store(),
    })
    const r = await rig.h.post(Array.from({ length: 3000 }, (_, i) => toolCall('big', {}, i)))
    expect([r.status, bucketOf(r)]).toEqual([429, 'identity'])
    expect(remaining(await rig.h.post(toolCall('big')))).toEqual({ identity: 999_000_000 })
  })
})
