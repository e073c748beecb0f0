/**
 * What callers and operators see when the budget store fails or hangs (docs/budget.md, "How it fails": the call is
 * admitted, and says so), and what startup says about the budget configuration.
 */
import type { AdmitResult, BudgetStore } from '../../src/budget/store'
import { gate } from '../e2e/raw-upstream'
import { toolCall } from '../helpers/harness'
import { open } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'
import { type BudgetHarness, startBudgetHarness } from './budget-harness'

/** A store whose database is down: every check rejects. */
class BrokenStore implements BudgetStore {
  checks = 0
  admit(): Promise<AdmitResult> {
    this.checks++
    return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'))
  }
  refund(): Promise<void> {
    return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432'))
  }
  async close(): Promise<void> {}
}

/** A store that decides in memory (admitNow, as MemoryBudgetStore) and fails: the stage's synchronous path. */
class BrokenSyncStore implements BudgetStore {
  admitNow(): AdmitResult {
    throw new Error('bucket table corrupted')
  }
  admit(): Promise<AdmitResult> {
    return Promise.reject(new Error('bucket table corrupted'))
  }
  refund(): Promise<void> {
    return Promise.resolve()
  }
  async close(): Promise<void> {}
}

/** A store whose database stopped answering: checks never settle. */
class HungStore implements BudgetStore {
  admit(): Promise<AdmitResult> {
    return new Promise(() => undefined)
  }
  refund(): Promise<void> {
    return new Promise(() => undefined)
  }
  async close(): Promise<void> {}
}

let h: BudgetHarness
afterEach(async () => {
  await h.close()
})

const echo = (id = 1) => toolCall('echo', { text: 'hi' }, id)

async function text(path: string): Promise<string> {
  return (await fetch(`${h.url}${path}`)).text()
}

describe('a failing store with on_store_error: open (the default)', () => {
  test('admits the call without RateLimit fields, audits why, counts it and warns once', async () => {
    h = await startBudgetHarness({ budget: { requests_per_window: 1 }, store: new BrokenStore() })
    for (let i = 0; i < 3; i++) {
      const res = await h.post(echo(i))
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBeNull()
    }
    const entries = await h.audit()
    expect(entries.map((e) => [e.decision, e.reason])).toEqual(
      Array(3).fill(['allow', 'budget check failed open: connect ECONNREFUSED 127.0.0.1:5432']),
    )
    const metrics = await text('/metrics')
    expect(metrics).toContain('wardline_budget_fail_open_total 3')
    expect(metrics).toContain('wardline_budget_store_errors_total 3')
    const warnings = h.logs.filter((l) => l.level === 'warn' && String(l.message).startsWith('budget check failed'))
    expect(warnings).toHaveLength(1)
    expect(warnings[0].error).toBe('connect ECONNREFUSED 127.0.0.1:5432')
    expect(JSON.parse(await text('/readyz'))).toMatchObject({ budget_fail_opens_last_minute: 3 })
  })

  test('a store that decides in memory and throws fails open the same way', async () => {
    h = await startBudgetHarness({ budget: { requests_per_window: 1 }, store: new BrokenSyncStore() })
    const res = await h.post(echo())
    expect(res.status).toBe(200)
    expect(res.headers.get('ratelimit')).toBeNull()
    const [entry] = await h.audit()
    expect(entry).toMatchObject({ decision: 'allow', reason: 'budget check failed open: bucket table corrupted' })
  })

  test('a store that hangs is given up on after check_timeout_seconds and the call goes through', async () => {
    h = await startBudgetHarness({ budget: { check_timeout_seconds: 0.05 }, store: new HungStore() })
    const started = performance.now()
    const res = await h.post(echo())
    expect(res.status).toBe(200)
    // The hung store never settles, so any answer means it was given up on; the bound tells the 0.05 s
    // configured apart from the 5 s default, with room for a loaded machine.
    expect(performance.now() - started).toBeLessThan(2500)
    const [entry] = await h.audit()
    expect(entry).toMatchObject({
      decision: 'allow',
      reason: 'budget check failed open: budget check took longer than 0.05s (budget.check_timeout_seconds)',
    })
  })
})

describe('a failing store with on_store_error: closed', () => {
  test('answers 503 with Retry-After, forwards nothing and audits the code and the cause', async () => {
    h = await startBudgetHarness({ budget: { on_store_error: 'closed' }, store: new BrokenStore() })
    const seenBefore = h.upstream.seen.length
    const res = await h.post(echo(7))
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('1')
    expect(res.json).toEqual({ jsonrpc: '2.0', id: 7, error: { code: 503, message: 'Service unavailable' } })
    expect(h.upstream.seen.length).toBe(seenBefore)
    const [entry] = await h.audit()
    expect(entry.decision).toBe('error')
    expect(entry.reason).toMatch(/^WL_BUDGET_STORE_FAILED: budget check failed and budget.on_store_error is closed: connect ECONNREFUSED/)
    expect(await text('/metrics')).toContain('wardline_budget_fail_open_total 0')
  })

  test('a store that decides in memory and throws fails closed the same way', async () => {
    h = await startBudgetHarness({ budget: { on_store_error: 'closed' }, store: new BrokenSyncStore() })
    const res = await h.post(echo(7))
    expect(res.status).toBe(503)
    const [entry] = await h.audit()
    expect(entry.decision).toBe('error')
    expect(entry.reason).toMatch(/^WL_BUDGET_STORE_FAILED: budget check failed and budget.on_store_error is closed: bucket table corrupted/)
  })

  test('calls that are not tools/call never reach the store', async () => {
    const store = new BrokenStore()
    h = await startBudgetHarness({ budget: { on_store_error: 'closed' }, store })
    expect((await h.post({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} })).status).toBe(200)
    expect(store.checks).toBe(0)
  })
})

describe('startup', () => {
  test('with the feature off, a budget: block is ignored (and said so) and nothing is counted', async () => {
    h = await startBudgetHarness({ features: { budget_enforcement: false }, budget: { requests_per_window: 1 } })
    expect(h.logs.some((l) => l.level === 'warn' && /budget_enforcement is false: the budget: block is ignored/.test(l.message))).toBe(true)
    for (let i = 0; i < 3; i++) {
      const res = await h.post(echo(i))
      expect(res.status).toBe(200)
      expect(res.headers.get('ratelimit')).toBeNull()
    }
    expect(JSON.parse(await text('/readyz'))).not.toHaveProperty('budget_fail_opens_last_minute')
  })

  test('with the feature off and no budget: block, nothing is said about budgets', async () => {
    h = await startBudgetHarness({ features: { budget_enforcement: false } })
    expect(h.logs.some((l) => /budget/.test(l.message))).toBe(false)
  })

  test('with the feature on and the memory store, startup says the limits are per process', async () => {
    h = await startBudgetHarness({ budget: { requests_per_window: 1 } })
    // The harness injects a MemoryBudgetStore (with a test clock): the notice is about the kind of store.
    expect(h.logs.some((l) => l.level === 'info' && /limits are per process/.test(l.message))).toBe(true)
    expect(JSON.parse(await text('/readyz'))).toMatchObject({ status: 'ready', budget_fail_opens_last_minute: 0 })
  })
})

/** A store whose check runs until the test lets it finish: the client can leave while it runs. */
class GatedStore implements BudgetStore {
  started = 0
  finished = 0
  readonly finish = gate()
  async admit(charges: Parameters<BudgetStore['admit']>[0]): Promise<AdmitResult> {
    this.started++
    await this.finish.wait
    this.finished++
    return {
      admitted: true,
      refusedBy: -1,
      buckets: charges.map((c) => ({
        kind: c.kind,
        name: c.name,
        limit: c.limit,
        windowSeconds: c.windowSeconds,
        remaining: c.limit - c.cost,
        resetSeconds: c.windowSeconds,
        window: 1,
      })),
    }
  }
  refunds = 0
  refund(): Promise<void> {
    this.refunds++
    return Promise.resolve()
  }
  async close(): Promise<void> {}
}

test('a client that leaves while its budget check runs is audited 499, not as an upstream failure, and nothing is forwarded', async () => {
  const store = new GatedStore()
  h = await startBudgetHarness({ budget: { requests_per_window: 5 }, store })
  const before = h.upstream.seen.length
  const gone = new AbortController()
  // node:http closes the connection when aborted (fetch's pool may keep the socket open for seconds).
  const call = open(`${h.url}/mcp`, {
    method: 'POST',
    headers: { 'x-wardline-identity': 'alice', 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(echo()),
    signal: gone.signal,
  }).catch(() => 'aborted')
  await waitFor(() => store.started === 1, { what: 'the budget check to start' })
  gone.abort()
  expect(await call).toBe('aborted')
  // The client has left once the gateway's side of its connection is closed too.
  const openConnections = (): Promise<number> => new Promise((resolve) => h.gateway.server.getConnections((_err, n) => resolve(n)))
  await waitFor(async () => (await openConnections()) === 0, { what: 'the gateway to see the client leave' })
  store.finish.open() // the check finishes after the client left
  // The entry is written once the request is done with (gateway.ts, in its finally): nothing can be forwarded after it.
  const entry = await waitFor(async () => (await h.audit()).find((e) => e.method === 'tools/call'), {
    what: 'the audit entry of the abandoned call',
  })
  expect(store.finished).toBe(1)
  expect(h.upstream.seen.length).toBe(before)
  // It never left the gateway, so what its check charged is given back.
  expect(entry).toMatchObject({
    method: 'tools/call',
    status: 499,
    reason: 'client closed the connection; budget refunded: the call never left the gateway',
  })
  expect(store.refunds).toBe(1)
})
