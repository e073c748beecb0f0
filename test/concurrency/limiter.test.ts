import { ConcurrencyLimiter, concurrencyKey } from '../../src/concurrency/limiter'
import { PENDING, PENDING_BODIES, SLOT, concurrencyStages } from '../../src/concurrency/stage'
import { parseMessages } from '../../src/jsonrpc/parse'
import { ConcurrencyMetrics } from '../../src/concurrency/metrics'
import { Exchange } from '../../src/pipeline/exchange'
import { CONTINUE, type Refusal } from '../../src/pipeline/stage'

describe('ConcurrencyLimiter', () => {
  test('a key gets up to maxPerKey slots, the next is refused, and a release makes room for one more', () => {
    const limiter = new ConcurrencyLimiter(2)
    expect(limiter.tryAcquire('a')).toBe(true)
    expect(limiter.tryAcquire('a')).toBe(true)
    expect(limiter.tryAcquire('a')).toBe(false)
    expect(limiter.inFlight('a')).toBe(2) // a refusal takes nothing
    limiter.release('a')
    expect(limiter.tryAcquire('a')).toBe(true)
    expect(limiter.tryAcquire('a')).toBe(false)
  })

  test('keys are counted apart', () => {
    const limiter = new ConcurrencyLimiter(1)
    expect(limiter.tryAcquire('a')).toBe(true)
    expect(limiter.tryAcquire('b')).toBe(true)
    expect(limiter.tryAcquire('a')).toBe(false)
  })

  test('the map is empty once every slot is released: idle identities cost nothing', () => {
    const limiter = new ConcurrencyLimiter(64)
    const keys = Array.from({ length: 1000 }, (_, i) => concurrencyKey('acme', `user-${i}`))
    for (const key of keys) for (let i = 0; i < 3; i++) limiter.tryAcquire(key)
    expect(limiter.size).toBe(1000)
    for (const key of keys) for (let i = 0; i < 3; i++) limiter.release(key)
    expect(limiter.size).toBe(0)
  })

  test('a release without a slot neither goes negative nor lends a slot to the next caller', () => {
    const limiter = new ConcurrencyLimiter(1)
    limiter.release('a')
    expect(limiter.size).toBe(0)
    expect(limiter.tryAcquire('a')).toBe(true)
    expect(limiter.tryAcquire('a')).toBe(false)
  })

  test('keys never collide whatever the tenant and identity hold', () => {
    expect(concurrencyKey('acme\0', 'alice')).not.toBe(concurrencyKey('acme', '\0alice'))
    expect(concurrencyKey('acme:', 'x')).not.toBe(concurrencyKey('acme', ':x'))
    expect(concurrencyKey('a', '1:ab')).not.toBe(concurrencyKey('1:a', 'b'))
    expect(concurrencyKey('4:ab', 'c')).not.toBe(concurrencyKey('4', ':abc'))
  })
})

describe('concurrencyStages', () => {
  const exchange = (identity: string | null, tenant = 'acme', method?: string): Exchange => {
    const ex = new Exchange({ method, headers: {} } as never, {} as never, 'r', 0, 0)
    if (identity !== null) ex.principal = { identity, tenant }
    return ex
  }
  /** alice's POST, its body not read yet. */
  const post = (): Exchange => exchange('alice', 'acme', 'POST')
  /** What the jsonrpc stage records once the body is read. */
  const parsed = (ex: Exchange, body: unknown): Exchange => {
    const result = parseMessages(Buffer.from(JSON.stringify(body)), { maxJsonDepth: 64, maxBatchMessages: 100 })
    if (!result.ok) throw new Error(result.reason)
    ex.calls = result.calls
    ex.batch = result.batch
    return ex
  }
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search' } }
  const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }
  const samplingAnswer = { jsonrpc: '2.0', id: 0, result: { role: 'assistant', content: { type: 'text', text: 'hi' } } }
  const cancelled = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }

  test('takes a slot, records its key on the Exchange, and refuses past the limit with a 429 that says which limit', async () => {
    const limiter = new ConcurrencyLimiter(1)
    const metrics = new ConcurrencyMetrics()
    const { slot } = concurrencyStages(limiter, metrics)
    const first = exchange('alice')
    expect(slot.run(first)).toBe(CONTINUE)
    expect(first.get(SLOT)).toBe(concurrencyKey('acme', 'alice'))
    const second = exchange('alice')
    const refusal = slot.run(second) as Refusal
    expect(refusal).toMatchObject({
      status: 429,
      decision: 'throttled',
      reason: 'concurrency limit: 1 requests in flight for this identity (max_concurrent_per_identity)',
      data: { retry_after_seconds: 1 },
      headers: { 'retry-after': '1', 'cache-control': 'no-store' },
    })
    expect(refusal.message).not.toMatch(/max_concurrent|alice/)
    expect(second.get(SLOT)).toBeNull() // refused: no slot to release
    expect(limiter.size).toBe(1)
    expect((await metrics.registry.getSingleMetricAsString('wardline_concurrency_refused_total')).trim().split('\n').at(-1)).toBe(
      'wardline_concurrency_refused_total 1',
    )
  })

  test('a request without a principal (a CORS preflight) takes no slot', () => {
    const limiter = new ConcurrencyLimiter(1)
    const ex = exchange(null)
    expect(concurrencyStages(limiter, new ConcurrencyMetrics()).slot.run(ex)).toBe(CONTINUE)
    expect(ex.get(SLOT)).toBeNull()
    expect(limiter.size).toBe(0)
  })

  test('past the cap, a few POSTs get a pending slot to have their body read; the next is refused before its body', () => {
    const limiter = new ConcurrencyLimiter(1)
    const { slot } = concurrencyStages(limiter, new ConcurrencyMetrics())
    expect(slot.run(post())).toBe(CONTINUE)
    const pending = Array.from({ length: PENDING_BODIES }, () => post())
    for (const ex of pending) {
      expect(slot.run(ex)).toBe(CONTINUE)
      expect(ex.get(PENDING)).toBe(true)
    }
    expect(slot.run(post())).toMatchObject({ status: 429 })
    expect(limiter.inFlight(concurrencyKey('acme', 'alice'))).toBe(1) // pending slots are not slots
    slot.finish?.(pending[0]) // a body that failed to arrive gives its pending slot back
    expect(slot.run(post())).toBe(CONTINUE)
  })

  test('a call read on a pending slot is refused and gives it back; an initialize becomes a slot up to twice the cap', () => {
    const limiter = new ConcurrencyLimiter(1)
    const { slot, verdict } = concurrencyStages(limiter, new ConcurrencyMetrics())
    const key = concurrencyKey('acme', 'alice')
    expect(slot.run(post())).toBe(CONTINUE)
    const refused = post()
    expect(slot.run(refused)).toBe(CONTINUE)
    expect(verdict.run(parsed(refused, call))).toMatchObject({ status: 429, decision: 'throttled' })
    expect(refused.get(SLOT)).toBeNull()
    slot.finish?.(refused) // the finish phase still runs: it must not release what is no longer held
    const init = post()
    expect(slot.run(init)).toBe(CONTINUE)
    expect(verdict.run(parsed(init, initialize))).toBe(CONTINUE)
    expect(init.get(PENDING)).toBe(false)
    expect(limiter.inFlight(key)).toBe(2)
    const third = post()
    expect(slot.run(third)).toBe(CONTINUE)
    expect(verdict.run(parsed(third, initialize))).toMatchObject({ status: 429 }) // twice the cap is the end
    const batched = post()
    expect(slot.run(batched)).toBe(CONTINUE)
    expect(verdict.run(parsed(batched, [initialize]))).toMatchObject({ status: 429 }) // a batch gets no pass
    slot.finish?.(init)
    expect(limiter.inFlight(key)).toBe(1)
  })

  test('a call read on a pending slot takes a slot that freed while its body arrived', () => {
    const limiter = new ConcurrencyLimiter(1)
    const { slot, verdict } = concurrencyStages(limiter, new ConcurrencyMetrics())
    const first = post()
    expect(slot.run(first)).toBe(CONTINUE)
    const second = post()
    expect(slot.run(second)).toBe(CONTINUE)
    expect(second.get(PENDING)).toBe(true)
    slot.finish?.(first)
    expect(verdict.run(parsed(second, call))).toBe(CONTINUE)
    expect(second.get(PENDING)).toBe(false)
    expect(limiter.inFlight(concurrencyKey('acme', 'alice'))).toBe(1)
    slot.finish?.(second)
    expect(limiter.size).toBe(0)
  })

  test("a client's responses and notifications are never refused and, once read, hold no slot", () => {
    const limiter = new ConcurrencyLimiter(1)
    const { slot, verdict } = concurrencyStages(limiter, new ConcurrencyMetrics())
    const key = concurrencyKey('acme', 'alice')
    const below = post()
    expect(slot.run(below)).toBe(CONTINUE)
    expect(verdict.run(parsed(below, samplingAnswer))).toBe(CONTINUE)
    expect(below.get(SLOT)).toBeNull()
    expect(limiter.inFlight(key)).toBe(0) // given back: an answer is no request in flight
    expect(slot.run(post())).toBe(CONTINUE) // the cap is full
    for (const body of [samplingAnswer, cancelled, [samplingAnswer, cancelled]]) {
      for (let i = 0; i < 3 * PENDING_BODIES; i++) {
        const ex = post()
        expect(slot.run(ex)).toBe(CONTINUE)
        expect(verdict.run(parsed(ex, body))).toBe(CONTINUE)
        slot.finish?.(ex)
      }
    }
    expect(limiter.inFlight(key)).toBe(1)
    // A tools/call without an id is no MCP notification: a lenient server runs it, so it counts.
    const idless = { jsonrpc: '2.0', method: 'tools/call', params: { name: 'search' } }
    const ex = post()
    expect(slot.run(ex)).toBe(CONTINUE)
    expect(verdict.run(parsed(ex, idless))).toMatchObject({ status: 429 })
  })

  test('a GET stream goes past the cap up to twice it', () => {
    const limiter = new ConcurrencyLimiter(2)
    const { slot } = concurrencyStages(limiter, new ConcurrencyMetrics())
    for (let i = 0; i < 2; i++) expect(slot.run(post())).toBe(CONTINUE)
    expect(slot.run(exchange('alice', 'acme', 'GET'))).toBe(CONTINUE)
    expect(slot.run(exchange('alice', 'acme', 'GET'))).toBe(CONTINUE)
    expect(slot.run(exchange('alice', 'acme', 'GET'))).toMatchObject({ status: 429 })
    expect(slot.run(exchange('alice', 'acme', 'DELETE'))).toMatchObject({ status: 429 })
  })
})
