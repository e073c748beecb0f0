import { identityKey, toolKey } from '../../src/budget/keys'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { manualClock } from './budget-harness'
import { bucket, budgetStoreContract } from './store-contract'

budgetStoreContract('MemoryBudgetStore', () => {
  const clock = manualClock()
  return Promise.resolve({
    store: new MemoryBudgetStore({ now: clock.now }),
    advance: (s) => {
      clock.advance(s)
      return Promise.resolve()
    },
  })
})

test('a window just opened reports exactly its length to reset at clock readings where float noise adds to it', async () => {
  // (now + 60000) - now is 60000.00000000001 at these readings (and at about 1% of all): Retry-After would say 61.
  const noisy = [5562.599999999999, 5599.099999999999, 5635.599999999999]
  for (const at of noisy) {
    const store = new MemoryBudgetStore({ now: () => at })
    const result = await store.admit([bucket(identityKey('acme', 'alice'), 5, { windowSeconds: 60 })])
    expect(result.buckets[0].resetSeconds).toBe(60)
  }
})

describe('MemoryBudgetStore memory', () => {
  test('a flood of distinct identities is forgotten once its window is over', () => {
    const clock = manualClock()
    const store = new MemoryBudgetStore({ now: clock.now })
    for (let i = 0; i < 20_000; i++) store.admitNow([bucket(identityKey('acme', `flood-${i}`), 100)])
    expect(store.bucketCount).toBe(20_000)
    clock.advance(61)
    // Eviction is bounded per check (no pause for the whole flood) but always ahead of creation.
    let checks = 0
    while (store.bucketCount > 1 && checks < 100) {
      store.admitNow([bucket(identityKey('acme', 'steady'), 1_000_000)])
      checks++
    }
    expect(store.bucketCount).toBe(1)
    expect(checks).toBeLessThanOrEqual(Math.ceil(20_000 / 1024) + 1)
  })

  test('eviction takes only expired buckets, across different window lengths', () => {
    const clock = manualClock()
    const store = new MemoryBudgetStore({ now: clock.now })
    store.admitNow([bucket(toolKey('short'), 5, { windowSeconds: 10 })])
    store.admitNow([bucket(identityKey('acme', 'long'), 5, { windowSeconds: 60 })])
    clock.advance(5)
    store.admitNow([bucket(toolKey('later'), 5, { windowSeconds: 10 })])
    clock.advance(6) // "short" expired; "later" and "long" still open
    store.admitNow([])
    expect(store.bucketCount).toBe(2)
    const later = store.admitNow([bucket(toolKey('later'), 5, { windowSeconds: 10 })])
    const long = store.admitNow([bucket(identityKey('acme', 'long'), 5, { windowSeconds: 60 })])
    expect(later.buckets[0].remaining).toBe(3) // its first charge was kept
    expect(long.buckets[0].remaining).toBe(3)
  })

  test('a bucket reopened after its window keeps its new count when the old window is evicted', () => {
    const clock = manualClock()
    const store = new MemoryBudgetStore({ now: clock.now })
    const alice = bucket(identityKey('acme', 'alice'), 5, { windowSeconds: 10 })
    for (let i = 0; i < 1100; i++) store.admitNow([bucket(identityKey('acme', `old-${i}`), 5, { windowSeconds: 10 })])
    store.admitNow([alice])
    clock.advance(11)
    // The first check evicts only 1024 of the 1101 expired windows, so alice's old one is still held
    // when she is charged again: her new window must replace it, and survive its eviction.
    store.admitNow([alice])
    store.admitNow([])
    expect(store.admitNow([alice]).buckets[0].remaining).toBe(3)
    expect(store.bucketCount).toBe(1)
  })

  test('close forgets every bucket', async () => {
    const store = new MemoryBudgetStore()
    await store.admit([bucket(identityKey('acme', 'alice'), 1)])
    await store.close()
    expect(store.bucketCount).toBe(0)
    expect((await store.admit([bucket(identityKey('acme', 'alice'), 1)])).admitted).toBe(true)
  })
})
