import { ConcurrencyLimiter, concurrencyKey } from '../../src/concurrency/limiter'
import { concurrencyStage } from '../../src/concurrency/stage'
import { Metrics } from '../../src/metrics'
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

describe('concurrencyStage', () => {
  const exchange = (identity: string | null, tenant = 'acme'): Exchange => {
    const ex = new Exchange({} as never, {} as never, 'r', 0, 0)
    if (identity !== null) ex.principal = { identity, tenant }
    return ex
  }

  test('takes a slot, records its key on the Exchange, and refuses past the limit with a 429 that says which limit', async () => {
    const limiter = new ConcurrencyLimiter(1)
    const metrics = new Metrics()
    const stage = concurrencyStage(limiter, metrics)
    const first = exchange('alice')
    expect(stage.run(first)).toBe(CONTINUE)
    expect(first.concurrencyKey).toBe(concurrencyKey('acme', 'alice'))
    const second = exchange('alice')
    const refusal = stage.run(second) as Refusal
    expect(refusal).toMatchObject({
      status: 429,
      decision: 'throttled',
      reason: 'concurrency limit: 1 requests in flight for this identity (max_concurrent_per_identity)',
      data: { retry_after_seconds: 1 },
      headers: { 'retry-after': '1', 'cache-control': 'no-store' },
    })
    expect(refusal.message).not.toMatch(/max_concurrent|alice/)
    expect(second.concurrencyKey).toBeNull() // refused: no slot to release
    expect(limiter.size).toBe(1)
    expect((await metrics.registry.getSingleMetricAsString('wardline_concurrency_refused_total')).trim().split('\n').at(-1)).toBe(
      'wardline_concurrency_refused_total 1',
    )
  })

  test('a request without a principal (a CORS preflight) takes no slot', () => {
    const limiter = new ConcurrencyLimiter(1)
    const ex = exchange(null)
    expect(concurrencyStage(limiter, new Metrics()).run(ex)).toBe(CONTINUE)
    expect(ex.concurrencyKey).toBeNull()
    expect(limiter.size).toBe(0)
  })
})
