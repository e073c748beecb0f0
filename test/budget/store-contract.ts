import { identityKey, tenantKey, toolKey } from '../../src/budget/keys'
import type { AdmitResult, BucketCharge, BucketKind, BudgetStore } from '../../src/budget/store'

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

/** A charge against `key`: charged (an admitted check adds `cost` to it) unless `charged: false`. */
export function bucket(
  key: string,
  limit: number,
  options: { kind?: BucketKind; windowSeconds?: number; cost?: number; name?: string; charged?: boolean } = {},
): BucketCharge {
  const kind = options.kind ?? (key.startsWith('["tool"') ? 'tool' : key.startsWith('["tenant"') ? 'tenant' : 'identity')
  return {
    key,
    kind,
    name: options.name ?? key,
    limit,
    windowSeconds: options.windowSeconds ?? 60,
    cost: options.cost ?? 1,
    charged: options.charged ?? true,
  }
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

    /**
     * What is left in `c`'s bucket, read without changing anything: a check that needs more than the
     * limit is refused by every store, and a refused check charges nothing and opens no window.
     */
    async function remainingIn(c: BucketCharge): Promise<number> {
      const probe = await store.admit([{ ...c, cost: c.limit + 1, charged: true }])
      expect(probe.admitted).toBe(false)
      return probe.buckets[0].remaining
    }

    afterEach(async () => {
      await store.close()
      await fx.cleanup?.()
    })

    test('the first charge opens a full window and reports what is left of it', async () => {
      const result = await store.admit([bucket(identityKey('acme', 'alice'), 5)])
      expect(result.admitted).toBe(true)
      expect(result.refusedBy).toBe(-1)
      expect(result.buckets).toHaveLength(1)
      expect(result.buckets[0].remaining).toBe(4)
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
      const identity = bucket(identityKey('acme', 'alice'), 2)
      await store.admit([tool, identity])
      const refused = await store.admit([tool, identity])
      expect(refused.refusedBy).toBe(0)
      expect(refused.buckets.map((b) => b.remaining)).toEqual([0, 1])
    })

    test('every charge gets a state in the given order, refused or not, with the counts unchanged by a refusal', async () => {
      const charges = [
        bucket(toolKey('search'), 10, { name: 'search' }),
        bucket(tenantKey('acme'), 8, { name: 'acme' }),
        bucket(identityKey('acme', 'alice'), 1, { name: 'alice' }),
      ]
      await store.admit(charges)
      const refused = await store.admit(charges)
      expect(refused.refusedBy).toBe(2)
      expect(refused.buckets.map((b) => b.remaining)).toEqual([9, 7, 0])
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

    test('a cost far beyond any integer column is refused like any cost above the limit, never an error', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 1_000_000_000)
      const refused = await store.admit([{ ...alice, cost: 10_000 * 1_000_000 }]) // max batch × max cost
      expect(refused.admitted).toBe(false)
      expect(refused.refusedBy).toBe(0)
      expect((await store.admit([{ ...alice, cost: 1_000_000_000 }])).admitted).toBe(true)
      expect((await store.admit([{ ...alice, cost: 2_000_000_000 }])).admitted).toBe(false) // count + cost past 2^31
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

    test('an uncharged bucket is checked but not charged: it opens no window and a full one still refuses', async () => {
      const tool = bucket(toolKey('search'), 2, { charged: false })
      const alice = bucket(identityKey('acme', 'alice'), 10)
      const first = await store.admit([tool, alice])
      expect(first.admitted).toBe(true)
      expect(first.buckets[0]).toMatchObject({ remaining: 2, window: null, resetSeconds: 60 })
      expect(first.buckets[1].remaining).toBe(9)
      expect((await store.admit([tool, alice])).buckets[0]).toMatchObject({ remaining: 2, window: null })
      expect(await remainingIn(tool)).toBe(2)
      // No window was opened by the uncharged checks: the first real charge, 30 s later, opens a full one.
      await fx.advance(30)
      const charged = await store.admit([{ ...tool, charged: true }])
      expect(charged.buckets[0].remaining).toBe(1)
      expect(charged.buckets[0].resetSeconds).toBeGreaterThan(60 - CLOCK_SLACK_SECONDS)
      // An uncharged check in an open window reports that window and leaves its count.
      const within = await store.admit([tool, alice])
      expect(within.buckets[0]).toMatchObject({ remaining: 1, window: charged.buckets[0].window })
      // It must still fit: a cost the bucket cannot take refuses the check, and nothing is charged.
      const tooBig = await store.admit([{ ...tool, cost: 2 }, alice])
      expect(tooBig).toMatchObject({ admitted: false, refusedBy: 0 })
      await store.admit([{ ...tool, charged: true }])
      const full = await store.admit([tool, alice])
      expect(full).toMatchObject({ admitted: false, refusedBy: 0 })
      expect(full.buckets[0].remaining).toBe(0)
      expect(await remainingIn(alice)).toBe(10 - 3) // first, second and within; the refused checks took nothing
    })

    test('a check with a charged and an uncharged bucket, admitted, moves only the charged count', async () => {
      const tenant = bucket(tenantKey('acme'), 10)
      const alice = bucket(identityKey('acme', 'alice'), 10)
      await store.admit([tenant]) // someone else's served call: the tenant has an open window with 1
      const result = await store.admit([
        { ...tenant, charged: false, cost: 3 },
        { ...alice, cost: 2 },
      ])
      expect(result.admitted).toBe(true)
      expect(result.buckets.map((b) => b.remaining)).toEqual([9, 8])
      expect(await remainingIn(tenant)).toBe(9)
      expect(await remainingIn(alice)).toBe(8)
    })

    test('a refund gives every charged bucket its units back, from that check only, and never goes below zero', async () => {
      const tool = bucket(toolKey('search'), 10)
      const tenant = bucket(tenantKey('acme'), 10, { charged: false })
      const alice = bucket(identityKey('acme', 'alice'), 10, { cost: 3 })
      // Other callers' units, before the check.
      await store.admit([tool])
      await store.admit([{ ...tenant, charged: true, cost: 2 }])
      await store.admit([{ ...alice, cost: 1 }])
      const charges = [tool, tenant, alice]
      const result = await store.admit(charges)
      expect(result.buckets.map((b) => b.remaining)).toEqual([8, 8, 6])
      await store.refund(charges, result)
      expect(await remainingIn(tool)).toBe(9)
      expect(await remainingIn(tenant)).toBe(8) // uncharged: the refund leaves it alone
      expect(await remainingIn(alice)).toBe(9)
      // A second refund of the same check takes back again (a store cannot tell), but only down to zero.
      await store.refund(charges, result)
      expect(await remainingIn(tool)).toBe(10)
      expect(await remainingIn(tenant)).toBe(8)
      expect(await remainingIn(alice)).toBe(10)
      expect((await store.admit([{ ...alice, cost: 10 }])).admitted).toBe(true) // exactly empty, not below
      expect(await remainingIn(alice)).toBe(0)
    })

    test('a refund after the window ended leaves the new window alone', async () => {
      const tool = bucket(toolKey('search'), 10, { windowSeconds: 10 })
      const alice = bucket(identityKey('acme', 'alice'), 10, { windowSeconds: 60 })
      await store.admit([alice])
      const charges = [tool, alice]
      const result = await store.admit(charges)
      await fx.advance(11) // the tool's window is over, alice's is not
      const fresh = await store.admit([tool])
      expect(fresh.buckets[0].remaining).toBe(9)
      expect(fresh.buckets[0].window).not.toEqual(result.buckets[0].window)
      await store.refund(charges, result)
      expect(await remainingIn(tool)).toBe(9) // the new window's charge stays
      expect(await remainingIn(alice)).toBe(9) // the still open window got its unit back
    })

    test('a refund of a refused check takes nothing back', async () => {
      const tool = bucket(toolKey('search'), 10)
      const alice = bucket(identityKey('acme', 'alice'), 1)
      for (let i = 0; i < 3; i++) await store.admit([tool])
      await store.admit([alice])
      const charges = [tool, alice]
      const refused = await store.admit(charges)
      expect(refused).toMatchObject({ admitted: false, refusedBy: 1 })
      expect(refused.buckets.every((b) => b.window !== null)).toBe(true)
      await store.refund(charges, refused)
      expect(await remainingIn(tool)).toBe(7)
      expect(await remainingIn(alice)).toBe(0)
    })

    test('50 concurrent checks, the even ones refunded as they finish, leave exactly the odd ones charged', async () => {
      // The tool's limit is exactly the demand: every check is admitted whatever the order, so the count is exact.
      const tool = bucket(toolKey('search'), 50)
      const tenant = bucket(tenantKey('acme'), 1000, { charged: false })
      await store.admit([{ ...tenant, charged: true, cost: 7 }])
      const outcomes = await Promise.all(
        Array.from({ length: 50 }, async (_, i) => {
          const charges = [tool, tenant, bucket(identityKey('acme', `user-${i}`), 1)]
          const result: AdmitResult = await store.admit(charges)
          if (result.admitted && i % 2 === 0) await store.refund(charges, result)
          return result.admitted
        }),
      )
      expect(outcomes.every(Boolean)).toBe(true)
      expect(await remainingIn(tool)).toBe(25)
      expect(await remainingIn(tenant)).toBe(1000 - 7)
      for (let i = 0; i < 4; i++) expect(await remainingIn(bucket(identityKey('acme', `user-${i}`), 1))).toBe(i % 2 === 0 ? 1 : 0)
      // Exact, not merely about right: 25 more fit, the 26th does not.
      expect((await store.admit([{ ...tool, cost: 25 }])).admitted).toBe(true)
      expect((await store.admit([tool])).admitted).toBe(false)
    })

    test('a bucket reports the same window for every check in it, and another one after it rolls over', async () => {
      const alice = bucket(identityKey('acme', 'alice'), 10)
      const first = await store.admit([alice])
      expect(first.buckets[0].window).not.toBeNull()
      await fx.advance(10)
      const second = await store.admit([alice])
      expect(second.buckets[0].window).toEqual(first.buckets[0].window)
      expect((await store.admit([{ ...alice, cost: 100 }])).buckets[0].window).toEqual(first.buckets[0].window) // refused, same window
      await fx.advance(51)
      const next = await store.admit([alice])
      expect(next.buckets[0].window).not.toBeNull()
      expect(next.buckets[0].window).not.toEqual(first.buckets[0].window)
      expect(next.buckets[0].remaining).toBe(9)
    })
  })
}
