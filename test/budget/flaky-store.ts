import { MemoryBudgetStore } from '../../src/budget/memory-store'
import type { AdmitResult, BucketCharge, BudgetStore, LocalCount, LocalHandOver } from '../../src/budget/store'

/** The cause a FlakyStore fails with, as a store whose database refuses connections would. */
export const DOWN = 'connect ECONNREFUSED 127.0.0.1:5432'

/**
 * A shared budget store for the tests of budget.on_store_error: local, where the store interface is
 * the point: it counts in a MemoryBudgetStore on the harness clock, fails (or hangs) while told to,
 * reports its replicas, and takes the local units a check carries (LocalHandOver) as the Postgres store
 * does: added before the check is judged, or not at all when the check fails.
 */
export class FlakyStore implements BudgetStore {
  failing = false
  hanging = false
  /** A check carrying local units fails while set (checks carrying none still succeed). */
  handOverFails = false
  replicas = 1
  refunds = 0
  /** The local units of each check that carried some, as handed over. */
  readonly handed: LocalCount[][] = []
  readonly shared: MemoryBudgetStore

  constructor(now: () => number) {
    this.shared = new MemoryBudgetStore({ now })
  }

  admit(charges: readonly BucketCharge[], _timeoutMs?: number, handOver?: LocalHandOver): Promise<AdmitResult> {
    if (this.hanging) return new Promise(() => undefined)
    if (this.failing) return Promise.reject(new Error(DOWN))
    const counts = handOver?.take(
      charges.map((c) => c.key),
      Infinity,
    )
    if (counts !== undefined && counts !== null) {
      if (this.handOverFails) {
        handOver?.failed()
        return Promise.reject(new Error(DOWN))
      }
      this.absorb(counts)
    }
    // As the Postgres store does after every statement that succeeds: what no longer waits is settled.
    if (handOver?.holdsCounts === true) handOver.landed()
    return this.shared.admit(charges)
  }

  refund(charges: readonly BucketCharge[], result: AdmitResult): Promise<void> {
    this.refunds++
    return this.failing ? Promise.reject(new Error(DOWN)) : this.shared.refund(charges, result)
  }

  /** Adds the units to the shared windows whatever the limit, as the Postgres store does. */
  private absorb(counts: readonly LocalCount[]): void {
    this.handed.push([...counts])
    for (const c of counts) {
      const limit = Number.MAX_SAFE_INTEGER
      this.shared.admitNow([
        { key: c.key, kind: 'identity', name: '', limit, windowSeconds: c.windowSeconds, cost: c.count, charged: true },
      ])
    }
  }

  liveReplicas(): number {
    return this.replicas
  }

  async close(): Promise<void> {}
}
