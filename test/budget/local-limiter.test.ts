/**
 * The limiter a replica enforces alone while the shared budget store fails (budget.on_store_error:
 * local): limit ÷ N, seeded from the shared counts it saw last, handing its counts back on recovery.
 */
import { LocalLimiter } from '../../src/budget/local-limiter'
import type { AdmitResult, BucketCharge, LocalCount } from '../../src/budget/store'
import { manualClock } from './budget-harness'

const bucket = (key: string, limit: number, windowSeconds = 60, cost = 1, charged = true): BucketCharge => ({
  key,
  kind: 'identity',
  name: key,
  limit,
  windowSeconds,
  cost,
  charged,
})

/** A shared store's verdict as the stage passes it to remember(): `used` of the limit, the window ending in `resetSeconds`. */
const shared = (
  charges: readonly BucketCharge[],
  used: readonly number[],
  resetSeconds: number,
  window: number | string = 1,
): AdmitResult => ({
  admitted: true,
  refusedBy: -1,
  buckets: charges.map((c, i) => ({ remaining: c.limit - used[i], resetSeconds, window })),
})

/** How many of `tries` single checks the limiter admits. */
function admitted(limiter: LocalLimiter, charges: readonly BucketCharge[], replicas: number, tries = 50): number {
  let n = 0
  for (let i = 0; i < tries; i++) if (limiter.admit(charges, replicas).result.admitted) n++
  return n
}

let clock: ReturnType<typeof manualClock>
let limiter: LocalLimiter
beforeEach(() => {
  clock = manualClock()
  limiter = new LocalLimiter({ now: clock.now })
})

describe('without a remembered shared count', () => {
  test('each bucket allows floor(limit ÷ replicas) per window', () => {
    const alice = [bucket('alice', 10)]
    expect(admitted(limiter, alice, 3)).toBe(3)
    clock.advance(60)
    expect(admitted(limiter, alice, 3)).toBe(3) // a new window
    expect(admitted(limiter, [bucket('bob', 10)], 1)).toBe(10)
  })

  test('a bucket whose limit is below the number of replicas admits nothing here', () => {
    const verdict = limiter.admit([bucket('alice', 2)], 3)
    expect(verdict.result).toMatchObject({ admitted: false, refusedBy: 0 })
    expect(verdict.result.buckets[0]).toMatchObject({ remaining: 0, resetSeconds: 60 })
  })

  test('a replica count below 1 or unknown counts as alone', () => {
    expect(admitted(limiter, [bucket('a', 4)], 0)).toBe(4)
    expect(admitted(limiter, [bucket('b', 4)], Number.NaN)).toBe(4)
  })

  test('all or nothing in check order: the first full bucket refuses and nothing is charged', () => {
    const tool = bucket('tool', 4)
    const identity = bucket('alice', 2)
    expect(admitted(limiter, [tool, identity], 1, 2)).toBe(2)
    const refused = limiter.admit([tool, identity], 1).result
    expect(refused).toMatchObject({ admitted: false, refusedBy: 1 })
    expect(refused.buckets.map((b) => b.remaining)).toEqual([2, 0]) // the tool kept its two units
    expect(admitted(limiter, [tool], 1)).toBe(2)
  })

  test('a bucket that is checked only keeps its count', () => {
    const tenant = bucket('tenant', 1, 60, 1, false)
    expect(admitted(limiter, [tenant, bucket('alice', 5)], 1)).toBe(5)
    expect(limiter.admit([bucket('tenant', 1), bucket('bob', 5)], 1).result.admitted).toBe(true)
  })
})

describe('seeded from the last shared verdict', () => {
  test('the rest of the shared window allows floor((limit − used) ÷ replicas), later windows floor(limit ÷ replicas)', () => {
    const alice = [bucket('alice', 10)]
    limiter.remember(alice, shared(alice, [6], 30))
    clock.advance(1)
    const first = limiter.admit(alice, 2).result
    expect(first.admitted).toBe(true)
    // Its window is the shared one: it resets when that ends, in 29 s, not a local minute from now.
    expect(first.buckets[0]).toMatchObject({ remaining: 1, resetSeconds: 29 })
    expect(admitted(limiter, alice, 2)).toBe(1)
    clock.advance(29)
    expect(admitted(limiter, alice, 2)).toBe(5)
  })

  test('a shared window already used up allows nothing here until it ends', () => {
    const alice = [bucket('alice', 10)]
    limiter.remember(alice, { admitted: false, refusedBy: 0, buckets: [{ remaining: 0, resetSeconds: 10, window: 1 }] })
    const refused = limiter.admit(alice, 1).result
    expect(refused).toMatchObject({ admitted: false, refusedBy: 0 })
    expect(refused.buckets[0].resetSeconds).toBe(10)
    clock.advance(10)
    expect(admitted(limiter, alice, 1)).toBe(10)
  })

  test('a bucket with no open shared window is not seeded', () => {
    const alice = [bucket('alice', 10)]
    limiter.remember(alice, { admitted: false, refusedBy: 0, buckets: [{ remaining: 10, resetSeconds: 60, window: null }] })
    expect(limiter.seedCount).toBe(0)
  })

  test('remembers at most maxKeys buckets, forgetting the first seen', () => {
    const small = new LocalLimiter({ now: clock.now, maxKeys: 3 })
    for (const key of ['a', 'b', 'c', 'd', 'e']) small.remember([bucket(key, 10)], shared([bucket(key, 10)], [10], 60))
    expect(small.seedCount).toBe(3)
    expect(admitted(small, [bucket('a', 10)], 1)).toBe(10) // forgotten: a fresh local window
    expect(admitted(small, [bucket('e', 10)], 1)).toBe(0) // remembered as used up
  })
})

test('a refund gives the units back to the local counts', () => {
  const alice = [bucket('alice', 2)]
  const first = limiter.admit(alice, 1)
  expect(admitted(limiter, alice, 1)).toBe(1)
  limiter.refund(first)
  expect(admitted(limiter, alice, 1)).toBe(1)
})

describe('handing local counts to the store when it answers again', () => {
  /** What take() gives, sorted by key. */
  const take = (l: LocalLimiter, keys: readonly string[] = [], more = Infinity): LocalCount[] | null =>
    l.take(keys, more)?.sort((a, b) => a.key.localeCompare(b.key)) ?? null

  test('hands over the units admitted in open windows once, then starts afresh', () => {
    const tool = bucket('tool', 10, 30)
    const alice = bucket('alice', 10)
    limiter.admit([tool, alice], 1)
    limiter.admit([tool, alice], 1)
    limiter.admit([bucket('bob', 10)], 1)
    expect(limiter.holdsCounts).toBe(true)
    expect(limiter.localAdmissions).toBe(3)
    expect(take(limiter)).toEqual([
      { key: 'alice', count: 2, windowSeconds: 60 },
      { key: 'bob', count: 1, windowSeconds: 60 },
      { key: 'tool', count: 2, windowSeconds: 30 },
    ])
    expect(take(limiter)).toBeNull() // in flight: one statement carries units at a time
    expect(limiter.landed()).toBe(5)
    expect(limiter.holdsCounts).toBe(false)
    expect(take(limiter)).toBeNull()
    // The shared counts are authoritative again: a later outage starts from them, not from these.
    expect(admitted(limiter, [alice], 1)).toBe(10)
  })

  test('a statement takes every unit of its own buckets, and of at most `more` others', () => {
    for (const key of ['a', 'b', 'c', 'd', 'e']) limiter.admit([bucket(key, 10)], 1)
    const first = take(limiter, ['d', 'e'], 1)
    expect(first?.map((c) => c.key)).toEqual(['a', 'd', 'e'])
    limiter.landed()
    expect(limiter.holdsCounts).toBe(true) // b and c still wait
    expect(take(limiter, [], 5)?.map((c) => c.key)).toEqual(['b', 'c'])
    limiter.landed()
    expect(limiter.holdsCounts).toBe(false)
  })

  test('the units of a seeded bucket go back to its shared bucket, and only while the shared window is open', () => {
    const alice = [bucket('alice', 10)]
    limiter.remember(alice, shared(alice, [4], 20, 'w1'))
    expect(admitted(limiter, alice, 1)).toBe(6)
    expect(take(limiter)).toEqual([{ key: 'alice', count: 6, windowSeconds: 60 }])
    expect(limiter.landed()).toBe(6)

    limiter.remember(alice, shared(alice, [10], 20, 'w1'))
    expect(admitted(limiter, alice, 1)).toBe(0)
    clock.advance(20)
    expect(admitted(limiter, alice, 1, 3)).toBe(3) // a later window, counted locally
    clock.advance(60)
    // Both the seeded window and the local one have ended: nothing to hand over, and the next
    // statement that succeeds settles it.
    expect(take(limiter, ['alice'])).toBeNull()
    expect(limiter.holdsCounts).toBe(true)
    expect(limiter.landed()).toBe(0)
    expect(limiter.holdsCounts).toBe(false)
  })

  test('units a failed statement carried wait again, without counting them twice', () => {
    const alice = [bucket('alice', 10)]
    admitted(limiter, alice, 1, 3)
    expect(take(limiter, ['alice'])?.[0].count).toBe(3)
    limiter.failed()
    admitted(limiter, alice, 1, 1) // the store failed again meanwhile
    expect(take(limiter, ['alice'])?.[0].count).toBe(4)
    expect(limiter.landed()).toBe(4)
    // The local counts kept enforcing all along: 4 of 10 used.
    expect(limiter.holdsCounts).toBe(false)
  })

  test('a check judged locally while units are in flight keeps the local counts, and is handed over next', () => {
    const alice = [bucket('alice', 4)]
    admitted(limiter, alice, 1, 2)
    expect(take(limiter, ['alice'])?.[0].count).toBe(2)
    const before = limiter.localAdmissions
    expect(limiter.admit(alice, 1).result.admitted).toBe(true) // the store failed again meanwhile
    expect(limiter.localAdmissions).toBe(before + 1) // a statement in flight now learns its verdicts are stale
    expect(limiter.landed()).toBe(2)
    expect(limiter.holdsCounts).toBe(true)
    expect(admitted(limiter, alice, 1)).toBe(1) // still enforcing on the 3 used here
    expect(take(limiter, ['alice'])?.[0].count).toBe(2)
    expect(limiter.landed()).toBe(2)
  })

  test('a refunded call is not handed over', () => {
    const alice = [bucket('alice', 4)]
    const verdict = limiter.admit(alice, 1)
    limiter.admit(alice, 1)
    limiter.refund(verdict)
    expect(take(limiter)?.[0].count).toBe(1)
  })

  test('pending counts stay bounded: past maxKeys the oldest are dropped', () => {
    const small = new LocalLimiter({ now: clock.now, maxKeys: 10 })
    for (let i = 0; i < 25; i++) small.admit([bucket(`k${i}`, 5)], 1)
    const handed = take(small) ?? []
    expect(handed.reduce((sum, c) => sum + c.count, 0)).toBeLessThanOrEqual(10)
    expect(handed.map((c) => c.key)).toContain('k24')
  })
})
