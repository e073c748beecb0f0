import type { AdmitResult, BucketCharge, BucketReading, BucketSelection, BudgetStore, LocalHandOver } from './store'

/** Whether the store behind may be used yet: null when it may, else the error to fail with. */
export interface StoreGate {
  notReadyError(): Error | null
}

/**
 * A shared store that is not ready yet (its database was unreachable at startup, or its migrations
 * have not run): every check rejects at once with the gate's error, so the budget stage applies
 * budget.on_store_error straight away instead of each call waiting for a connection that will not
 * come, or reaching a function the schema does not have yet. Once the gate opens it only delegates.
 */
export class StartingBudgetStore implements BudgetStore {
  readonly admitNow?: (charges: readonly BucketCharge[]) => AdmitResult
  readonly liveReplicas?: () => number
  readonly inspect?: (selection: BucketSelection, timeoutMs?: number) => Promise<BucketReading[]>
  readonly reset?: (selection: BucketSelection, timeoutMs?: number) => Promise<BucketReading[]>

  constructor(
    private readonly inner: BudgetStore,
    private readonly gate: StoreGate,
  ) {
    // Only what the inner store has: the budget stage and the local limiter look at which optional
    // methods a store offers.
    const admitNow = inner.admitNow?.bind(inner)
    if (admitNow !== undefined) {
      this.admitNow = (charges) => {
        const err = gate.notReadyError()
        if (err !== null) throw err
        return admitNow(charges)
      }
    }
    // Not gated: it reads what the store last heard (at least 1), never the database.
    this.liveReplicas = inner.liveReplicas?.bind(inner)
    // The admin API's read and reset: gated like a check, so an operator hears "not ready" at once.
    const inspect = inner.inspect?.bind(inner)
    const reset = inner.reset?.bind(inner)
    if (inspect !== undefined) this.inspect = (selection, timeoutMs) => this.gated(() => inspect(selection, timeoutMs))
    if (reset !== undefined) this.reset = (selection, timeoutMs) => this.gated(() => reset(selection, timeoutMs))
  }

  admit(charges: readonly BucketCharge[], timeoutMs?: number, handOver?: LocalHandOver): Promise<AdmitResult> {
    const err = this.gate.notReadyError()
    return err === null ? this.inner.admit(charges, timeoutMs, handOver) : Promise.reject(err)
  }

  refund(charges: readonly BucketCharge[], result: AdmitResult, timeoutMs?: number): Promise<void> {
    const err = this.gate.notReadyError()
    return err === null ? this.inner.refund(charges, result, timeoutMs) : Promise.reject(err)
  }

  close(): Promise<void> {
    return this.inner.close()
  }

  private gated<T>(run: () => Promise<T>): Promise<T> {
    const err = this.gate.notReadyError()
    return err === null ? run() : Promise.reject(err)
  }
}
