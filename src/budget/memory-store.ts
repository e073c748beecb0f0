import type { AdmitResult, BucketCharge, BucketReading, BucketSelection, BucketState, BudgetStore } from './store'

/** Milliseconds on a clock that never goes backwards. */
export type Clock = () => number

export interface MemoryBudgetStoreOptions {
  /**
   * Defaults to performance.now(): a monotonic clock, so an NTP step or a leap second neither ends a
   * window early nor stretches it. Tests inject their own and advance it instead of sleeping.
   */
  readonly now?: Clock
}

/**
 * One counted window. The object is both the Map value and the expiry-queue slot, so a bucket costs
 * one allocation. Measured on Node 20 (x64): 1,000,000 identity buckets with 47-character keys
 * (`["identity","acme","user-00000001@example.com"]`) take 200 MB of heap, so ~200 bytes per live
 * bucket (this object, the key string, the Map entry and its hash-table slack, the queue slot),
 * plus one byte per extra key character. Command in docs/budget.md.
 */
interface Window {
  readonly key: string
  /** Requests charged in this window. */
  count: number
  /** Clock time (ms) at which the window ends and the bucket may be forgotten. */
  readonly endsAt: number
}

/**
 * Windows of one length, in the order they opened. Windows of equal length that open in clock order
 * also end in clock order, so the oldest one is always at the head: finding what expired never scans
 * the live ones. A plain array with a moving head (compacted when half of it is dead) keeps push and
 * shift O(1) amortised.
 */
class ExpiryQueue {
  private items: Window[] = []
  private head = 0

  push(w: Window): void {
    this.items.push(w)
  }

  peek(): Window | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined
  }

  shift(): void {
    this.items[this.head++] = undefined as unknown as Window // let the evicted window be collected
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head)
      this.head = 0
    }
  }
}

/**
 * Expired windows forgotten per `admit`, at most. A check creates at most one window per charge (a
 * handful), so evicting up to this many keeps memory shrinking under any request rate, while a
 * check that follows a long quiet spell after a flood never pays for the whole flood at once.
 */
const MAX_EVICTIONS_PER_ADMIT = 1024

/**
 * Budget buckets in this process's memory (the default; limits are per process). `admit` does all
 * its work synchronously, so concurrent checks on one event loop are serialised and exact: the
 * check-then-charge of one call can never interleave with another's.
 *
 * Memory stays bounded under a flood of distinct identities: a bucket lives only while its window is
 * open, so the store holds at most the buckets opened during the last window_seconds. Expired
 * buckets are evicted from the head of per-window-length expiry queues on the request path: O(1)
 * amortised per bucket (one Map delete and one array slot, ~0.4 µs measured), never a scan of
 * live buckets, and at most MAX_EVICTIONS_PER_ADMIT per check. After traffic stops, the last window's buckets stay in
 * memory until the next checks evict them.
 */
export class MemoryBudgetStore implements BudgetStore {
  readonly neverWaits = true
  private readonly windows = new Map<string, Window>()
  /** One queue per window length in ms: a config has only a few distinct lengths. */
  private readonly queues = new Map<number, ExpiryQueue>()
  private readonly now: Clock
  /**
   * admitNow's windows per charge, between its check and its charge. Reused: admitNow never waits, so
   * no other check can run while one holds it, and it is emptied before admitNow returns.
   */
  private readonly open: Array<Window | null> = []

  constructor(options: MemoryBudgetStoreOptions = {}) {
    this.now = options.now ?? (() => performance.now())
  }

  /** Live buckets held (tests, and the bytes-per-bucket measurement in docs/budget.md). */
  get bucketCount(): number {
    return this.windows.size
  }

  admit(charges: readonly BucketCharge[]): Promise<AdmitResult> {
    return Promise.resolve(this.admitNow(charges))
  }

  /** The synchronous decision: check every bucket in order, then charge all of them or none. */
  admitNow(charges: readonly BucketCharge[]): AdmitResult {
    const now = this.now()
    this.evictExpired(now)
    const open = this.open
    let refusedBy = -1
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]
      const w = this.windows.get(c.key)
      // Eviction is bounded per call, so an expired window may still be here: it counts as absent.
      const live = w !== undefined && w.endsAt > now ? w : null
      open[i] = live
      if (refusedBy < 0 && (live === null ? 0 : live.count) + c.cost > c.limit) refusedBy = i
    }
    const buckets = new Array<BucketState>(charges.length)
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]
      let w = open[i]
      open[i] = null // hold no window past this check
      if (refusedBy < 0 && c.charged) {
        if (w === null) w = this.openWindow(c, now)
        w.count += c.cost
      }
      const used = w === null ? 0 : w.count
      buckets[i] = {
        remaining: Math.max(0, c.limit - used),
        // A bucket with no open window would open a full one with the next charge. The clamp keeps
        // float noise ((now + 60000) - now is 60000.000000007 for some now) from announcing 61 s.
        resetSeconds: w === null ? c.windowSeconds : Math.min(c.windowSeconds, (w.endsAt - now) / 1000),
        window: w === null ? null : w.endsAt,
      }
    }
    return { admitted: refusedBy < 0, buckets, refusedBy }
  }

  /**
   * Takes each charged cost back from the window it went to. A window is told apart by its end: a key
   * keeps one window length (keys.ts puts the length in the key), so a later window of the same key
   * always ends later.
   */
  refund(charges: readonly BucketCharge[], result: AdmitResult): Promise<void> {
    if (!result.admitted) return Promise.resolve()
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]
      if (!c.charged) continue
      const w = this.windows.get(c.key)
      if (w !== undefined && w.endsAt === result.buckets[i].window) w.count = Math.max(0, w.count - c.cost)
    }
    return Promise.resolve()
  }

  /**
   * This process's counts only (budgets in memory are per replica). A prefix walks every live bucket:
   * an operator's occasional question, never the request path.
   */
  inspect(selection: BucketSelection): Promise<BucketReading[]> {
    const now = this.now()
    const out: BucketReading[] = selection.keys.map(
      (key) => this.reading(key, this.windows.get(key), now) ?? { key, used: 0, resetSeconds: null },
    )
    for (const [key, w] of this.matching(selection.prefixes, now)) out.push({ key, used: w.count, resetSeconds: (w.endsAt - now) / 1000 })
    return Promise.resolve(out)
  }

  /**
   * Forgets the selected windows in this process: the next check opens a fresh one. Their expiry-queue
   * slots stay until they expire and are then skipped (the Map no longer points at them), as for a
   * window replaced by a new one.
   */
  reset(selection: BucketSelection): Promise<BucketReading[]> {
    const now = this.now()
    const out: BucketReading[] = []
    for (const key of selection.keys) {
      const w = this.windows.get(key)
      if (w === undefined) continue
      out.push(this.reading(key, w, now) ?? { key, used: 0, resetSeconds: null })
      this.windows.delete(key)
    }
    for (const [key, w] of this.matching(selection.prefixes, now)) {
      out.push({ key, used: w.count, resetSeconds: (w.endsAt - now) / 1000 })
      this.windows.delete(key)
    }
    return Promise.resolve(out)
  }

  /** A window still open, as an operator reads it; null when it has ended (it counts as absent). */
  private reading(key: string, w: Window | undefined, now: number): BucketReading | null {
    return w === undefined || w.endsAt <= now ? null : { key, used: w.count, resetSeconds: (w.endsAt - now) / 1000 }
  }

  private matching(prefixes: readonly string[] | undefined, now: number): Array<[string, Window]> {
    if (prefixes === undefined || prefixes.length === 0) return []
    const out: Array<[string, Window]> = []
    for (const [key, w] of this.windows) if (w.endsAt > now && prefixes.some((p) => key.startsWith(p))) out.push([key, w])
    return out
  }

  close(): Promise<void> {
    this.windows.clear()
    this.queues.clear()
    return Promise.resolve()
  }

  private openWindow(c: BucketCharge, now: number): Window {
    const lengthMs = c.windowSeconds * 1000
    const w: Window = { key: c.key, count: 0, endsAt: now + lengthMs }
    // A window that expired but was not evicted yet is replaced here; its queue slot is skipped
    // later because the Map no longer points at it.
    this.windows.set(c.key, w)
    let queue = this.queues.get(lengthMs)
    if (queue === undefined) this.queues.set(lengthMs, (queue = new ExpiryQueue()))
    queue.push(w)
    return w
  }

  private evictExpired(now: number): void {
    let budget = MAX_EVICTIONS_PER_ADMIT
    for (const queue of this.queues.values()) {
      for (let w = queue.peek(); w !== undefined && w.endsAt <= now && budget > 0; w = queue.peek()) {
        queue.shift()
        budget--
        if (this.windows.get(w.key) === w) this.windows.delete(w.key)
      }
    }
  }
}
