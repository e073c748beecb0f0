import { identityKey, tenantKey, toolKey } from '../../src/budget/keys'
import type { BucketCharge, BucketKind, BudgetStore } from '../../src/budget/store'

/**
 * A store under test and a way to move its clock. `advance(seconds)` must make every bucket see that
 * much more time pass: the memory store gets an injected clock; a database store can shift its stored
 * window boundaries back (or its clock forward) by the same amount.
 */
export interface StoreFixture {
  readonly store: BudgetStore
  advance(seconds: number): Promise<void>
  /** Called after each test, after store.close(). */
  cleanup?(): Promise<void>
}

/** Reset times are compared within this many seconds, so a store on a real clock passes too. */
const CLOCK_SLACK_SECONDS = 2

export function bucket(
  key: string,
  limit: number,
  options: { kind?: BucketKind; windowSeconds?: number; cost?: number; name?: string } = {},
): BucketCharge {
  const kind = options.kind ?? (key.startsWith('["tool"') ? 'tool' : key.startsWith('["tenant"') ? 'tenant' : 'identity')
  return { key, kind, name: options.name ?? key, limit, windowSeconds: options.windowSeconds ?? 60, cost: options.cost ?? 1 }
}

/**
 * The BudgetStore contract (src/budget/store.ts), run by every implementation with its own fixture.
 * Each test gets a fresh fixture, so bucket names may repeat across tests.
 */
export function budgetStoreContract(label: string, open: () => Promise<StoreFixture>): void {
  describe(`BudgetStore contract: ${label}`, () => {
    let fx: StoreFixture
    let store: BudgetStore

    beforeEach(async () => {
      fx = await open()
      store = fx.store
    })

    afterEach(async () => {
      await store.close()
      await fx.cleanup?.()
    })

    test('the first charge opens a full window and reports what is left of it', async () => {
      const result = await store.admit([bucket(identityKey('acme', 'alice'), 5)])
      expect(result.admitted).toBe(true)
      expect(result.refusedBy).toBe(-1)
      expect(result.buckets).toHaveLength(1)
      expect(result.buckets[0]).toMatchObject({ kind: 'identity', limit: 5, windowSeconds: 60, remaining: 4 })
      expect(result.buckets[0].resetSeconds).toBeGreaterThan(60 - CLOCK_SLACK_SECONDS)
      expect(result.buckets[0].resetSeconds).toBeLessThanOrEqual(60)
    })

    test('a bucket admits exactly its limit, then refuses with nothing remaining', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 3)
      const admitted = []
      for (let i = 0; i < 5; i++) admitted.push((await store.admit([alice])).admitted)
      expect(admitted).toEqual([true, true, true, false, false])
      const refused = await store.admit([alice])
      expect(refused.refusedBy).toBe(0)
      expect(refused.buckets[0].remaining).toBe(0)
    })

    test('the window is fixed from its first request: the reset time counts down and the count comes back after it', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 2)
      await store.admit([alice])
      await fx.advance(20)
      const second = await store.admit([alice])
      expect(second.buckets[0].remaining).toBe(0)
      expect(second.buckets[0].resetSeconds).toBeGreaterThan(40 - CLOCK_SLACK_SECONDS)
      expect(second.buckets[0].resetSeconds).toBeLessThanOrEqual(40 + CLOCK_SLACK_SECONDS)
      expect((await store.admit([alice])).admitted).toBe(false)
      await fx.advance(41) // 61 s after the first request: the window that opened then is over
      const next = await store.admit([alice])
      expect(next.admitted).toBe(true)
      expect(next.buckets[0].remaining).toBe(1)
      expect(next.buckets[0].resetSeconds).toBeGreaterThan(60 - CLOCK_SLACK_SECONDS)
    })

    test('a refused request charges no bucket, not even those checked before the full one', async () => {
      const tool = bucket(toolKey('search'), 2)
      const tenant = bucket(tenantKey('acme'), 1)
      expect((await store.admit([tool, tenant])).admitted).toBe(true)
      const refused = await store.admit([tool, tenant])
      expect(refused.admitted).toBe(false)
      expect(refused.refusedBy).toBe(1) // the tenant is full
      expect((await store.admit([tool])).admitted).toBe(true) // so the tool kept its second slot
      expect((await store.admit([tool])).admitted).toBe(false)
    })

    test('the first full bucket in the given order is the one reported', async () => {
      const tool = bucket(toolKey('search'), 1)
      const identity = bucket(identityKey('acme', 'alice'), 1)
      await store.admit([tool, identity])
      const refused = await store.admit([tool, identity])
      expect(refused.refusedBy).toBe(0)
      expect(refused.buckets.map((b) => b.kind)).toEqual(['tool', 'identity'])
    })

    test('every charge gets a state in the given order, refused or not, with the counts unchanged by a refusal', async () => {
      const charges = [
        bucket(toolKey('search'), 10, { name: 'search' }),
        bucket(tenantKey('acme'), 10, { name: 'acme' }),
        bucket(identityKey('acme', 'alice'), 1, { name: 'alice' }),
      ]
      await store.admit(charges)
      const refused = await store.admit(charges)
      expect(refused.refusedBy).toBe(2)
      expect(refused.buckets.map((b) => [b.kind, b.name, b.limit, b.remaining])).toEqual([
        ['tool', 'search', 10, 9],
        ['tenant', 'acme', 10, 9],
        ['identity', 'alice', 1, 0],
      ])
    })

    test('a charge costing more than one takes it all or nothing', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 5)
      expect((await store.admit([{ ...alice, cost: 3 }])).buckets[0].remaining).toBe(2)
      const refused = await store.admit([{ ...alice, cost: 3 }])
      expect(refused.admitted).toBe(false)
      expect(refused.buckets[0].remaining).toBe(2)
      expect((await store.admit([{ ...alice, cost: 2 }])).admitted).toBe(true)
    })

    test('a charge larger than the limit is refused even by an empty bucket, which stays empty', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 2)
      const refused = await store.admit([{ ...alice, cost: 3 }])
      expect(refused.admitted).toBe(false)
      expect(refused.buckets[0].remaining).toBe(2)
      expect(refused.buckets[0].resetSeconds).toBeGreaterThan(0)
      expect((await store.admit([{ ...alice, cost: 2 }])).admitted).toBe(true)
    })

    test('keys that would collide under naive concatenation are different buckets', async () => {
      const left = bucket(identityKey('acme\0', 'alice'), 1)
      const right = bucket(identityKey('acme', '\0alice'), 1)
      expect(left.key).not.toBe(right.key)
      expect((await store.admit([left])).admitted).toBe(true)
      expect((await store.admit([right])).admitted).toBe(true)
      expect((await store.admit([left])).admitted).toBe(false)
    })

    test('the same name as identity, tenant and tool, and in two tenants, makes independent buckets', async () => {
      const keys = [identityKey('acme', 'x'), identityKey('globex', 'x'), tenantKey('x'), toolKey('x')]
      expect(new Set(keys).size).toBe(4)
      for (const key of keys) expect((await store.admit([bucket(key, 1)])).admitted).toBe(true)
      for (const key of keys) expect((await store.admit([bucket(key, 1)])).admitted).toBe(false)
    })

    test('buckets in one check keep their own windows', async () => {
      const tool = bucket(toolKey('search'), 1, { windowSeconds: 10 })
      const identity = bucket(identityKey('acme', 'alice'), 2, { windowSeconds: 60 })
      await store.admit([tool, identity])
      await fx.advance(11)
      const second = await store.admit([tool, identity])
      expect(second.admitted).toBe(true)
      expect(second.buckets.map((b) => b.remaining)).toEqual([0, 0])
      expect(second.buckets[0].resetSeconds).toBeGreaterThan(10 - CLOCK_SLACK_SECONDS)
      expect(second.buckets[1].resetSeconds).toBeLessThanOrEqual(49 + CLOCK_SLACK_SECONDS)
    })

    test('50 concurrent callers against a limit of 10 admit exactly 10', async () => {
      const shared = [bucket(toolKey('search'), 10), bucket(tenantKey('acme'), 1000)]
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => store.admit([...shared, bucket(identityKey('acme', `user-${i}`), 5)])),
      )
      expect(results.filter((r) => r.admitted)).toHaveLength(10)
      expect(results.filter((r) => !r.admitted).every((r) => r.refusedBy === 0)).toBe(true)
      // the tenant was charged only for the admitted ten
      const after = await store.admit([bucket(tenantKey('acme'), 1000)])
      expect(after.buckets[0].remaining).toBe(1000 - 11)
    })

    test('one identity hammering its own bucket concurrently gets exactly its limit', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 10)
      const results = await Promise.all(Array.from({ length: 50 }, () => store.admit([alice])))
      expect(results.filter((r) => r.admitted)).toHaveLength(10)
    })
  })
}
