import { MemoryBudgetStore } from '../../src/budget/memory-store'
import type { AdmitResult, BucketCharge, BudgetStore, LocalCount } from '../../src/budget/store'

/** The cause a FlakyStore fails with, as a store whose database refuses connections would. */
export const DOWN = 'connect ECONNREFUSED 127.0.0.1:5432'

/**
 * A shared budget store for the tests of budget.on_store_error: local, where the store interface is
 * the point: it counts in a MemoryBudgetStore on the harness clock, fails (or hangs) while told to,
 * reports its replicas, and takes hand-overs (`absorb`) as the Postgres store does.
 */
export class FlakyStore implements BudgetStore {
  failing = false
  hanging = false
  /** absorb rejects while set, even when checks succeed (a hand-over that fails on its own). */
  absorbFails = false
  replicas = 1
  refunds = 0
  readonly absorbed: LocalCount[][] = []
  readonly shared: MemoryBudgetStore

  constructor(now: () => number) {
    this.shared = new MemoryBudgetStore({ now })
  }

  admit(charges: readonly BucketCharge[]): Promise<AdmitResult> {
    if (this.hanging) return new Promise(() => undefined)
    if (this.failing) return Promise.reject(new Error(DOWN))
    return this.shared.admit(charges)
  }

  refund(charges: readonly BucketCharge[], result: AdmitResult): Promise<void> {
    this.refunds++
    return this.failing ? Promise.reject(new Error(DOWN)) : this.shared.refund(charges, result)
  }

  /** Adds the units to the shared windows whatever the limit, as the Postgres store does. */
  absorb(counts: readonly LocalCount[]): Promise<void> {
    if (this.failing || this.absorbFails) return Promise.reject(new Error(DOWN))
    this.absorbed.push([...counts])
    for (const c of counts) {
      const limit = Number.MAX_SAFE_INTEGER
      this.shared.admitNow([
        { key: c.key, kind: 'identity', name: '', limit, windowSeconds: c.windowSeconds, cost: c.count, charged: true },
      ])
    }
    return Promise.resolve()
  }

  liveReplicas(): number {
    return this.replicas
  }

  async close(): Promise<void> {}
}
