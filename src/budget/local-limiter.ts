import { type Clock, MemoryBudgetStore } from './memory-store'
import type { AdmitResult, BucketCharge, BucketState, LocalCount, LocalHandOver, WindowId } from './store'

/**
 * Bucket keys whose shared count is remembered, at most, and local counts waiting to be handed to the
 * store. Measured on Node 20 (x64): 100,000 remembered identity keys take 9 MB of heap (90 bytes a key)
 * beyond the key strings, which the identity key cache mostly holds anyway; remembering costs ~150 ns
 * per check of a hot key, ~470 ns over 100,000 distinct keys (cache misses), against a round trip to
 * Postgres of hundreds of µs. How it was measured: docs/postgres.md.
 */
export const MAX_LOCAL_KEYS = 100_000

/** What the shared store last said about a bucket: its count then, and when (on this clock) that window ends. */
interface Seed {
  used: number
  endsAt: number
  window: WindowId
}

/** Units this replica admitted on its own in one local window, not yet added to the shared count. */
interface Pending {
  /** The local counter's key they were counted under (the shared key, or it and a remembered window). */
  readonly localKey: string
  /** Tool and tenant entries are never pruned: bounded by the config, and shared by every caller. */
  readonly kind: BucketCharge['kind']
  readonly windowSeconds: number
  /** The local window (the counter's window id) these units went to: a refund matches it. */
  readonly window: WindowId
  /** Until when the shared window they belong to is open, as far as this replica knows. */
  readonly openUntil: number
  count: number
}

/** A degraded check's verdict, and what a refund of it needs. */
export class LocalAdmission {
  constructor(
    /** The verdict in the shared store's shape: the stage builds headers and 429s from it unchanged. */
    readonly result: AdmitResult,
    /** The charges as the local counter saw them (its keys and allowances). */
    readonly local: readonly BucketCharge[],
    /** The counter it was charged to: one replaced since (its counts handed over) takes no refund. */
    readonly counter: MemoryBudgetStore,
    /** The charges as the shared store knows them (`local` in the same order): units waiting are filed under their keys. */
    readonly shared: readonly BucketCharge[],
  ) {}
}

/**
 * What a replica enforces on its own while the shared budget store fails (budget.on_store_error:
 * local): every bucket at limit ÷ N, N the live replicas the store last reported, rounded down (a
 * bucket whose limit is below N admits nothing here). A bucket whose shared window this replica saw
 * recently starts from what was used then: floor((limit − used) ÷ N) for the rest of that window,
 * floor(limit ÷ N) per window after it.
 *
 * The counting itself is a MemoryBudgetStore (all or nothing, check order, refusedBy, windows that open
 * at their first charge): this class only chooses each bucket's key and allowance, remembers the shared
 * counts, and keeps the units admitted here until the store takes them back (LocalHandOver: the store
 * adds them in the statement that judges the next checks of their buckets). A bucket
 * seeded from a shared window is counted under its own key (the bucket's key and that window's id), so
 * its local count ends with the shared window and survives the store flapping within it.
 *
 * One per process, across reloads (budget/open.ts), so a reload during an outage keeps the local counts.
 */
export class LocalLimiter implements LocalHandOver {
  private readonly seeds = new Map<string, Seed>()
  /** Units waiting to be handed over, by shared key. */
  private readonly pending = new Map<string, Pending>()
  /** Units a statement carries now (taken, not yet landed or failed), by shared key; null when none does. */
  private inFlight: Map<string, Pending> | null = null
  private counter: MemoryBudgetStore
  private readonly now: Clock
  private readonly maxKeys: number
  /** Degraded checks since the counter was last replaced: none means there is nothing to hand over. */
  private degradedChecks = 0
  private admissions = 0

  constructor(options: { now?: Clock; maxKeys?: number } = {}) {
    this.now = options.now ?? (() => performance.now())
    this.maxKeys = options.maxKeys ?? MAX_LOCAL_KEYS
    this.counter = new MemoryBudgetStore({ now: this.now })
  }

  /** True while the limiter holds local counts or state from an outage that the store has not taken back. */
  get holdsCounts(): boolean {
    return this.degradedChecks > 0
  }

  /** Checks admitted here so far (LocalHandOver.localAdmissions). */
  get localAdmissions(): number {
    return this.admissions
  }

  /** Bucket keys whose shared count is remembered (tests). */
  get seedCount(): number {
    return this.seeds.size
  }

  /**
   * A verdict of the shared store: remembers each bucket's count and window end. Runs on every shared
   * check, so it costs a Map lookup per bucket and allocates only for a key it has not seen.
   */
  remember(charges: readonly BucketCharge[], result: AdmitResult): void {
    const now = this.now()
    const buckets = result.buckets
    for (let i = 0; i < buckets.length; i++) {
      const b = buckets[i]
      // No open window: nothing is used, and a seed kept from an older window has ended by now.
      if (b.window === null) continue
      const c = charges[i]
      const used = c.limit - b.remaining
      const endsAt = now + b.resetSeconds * 1000
      const seed = this.seeds.get(c.key)
      if (seed !== undefined) {
        seed.used = used
        seed.endsAt = endsAt
        seed.window = b.window
        continue
      }
      // The oldest first-seen key goes: a busy one comes back with its next check.
      if (this.seeds.size >= this.maxKeys) this.seeds.delete(this.seeds.keys().next().value as string)
      this.seeds.set(c.key, { used, endsAt, window: b.window })
    }
  }

  /** Judges a check the shared store could not: every bucket at its local allowance, with `replicas` sharing the limit. */
  admit(charges: readonly BucketCharge[], replicas: number): LocalAdmission {
    const now = this.now()
    // NaN or below 1 (a store that knows no better) counts as alone: the full limit, never a division by zero.
    const n = replicas >= 1 ? Math.floor(replicas) : 1
    this.degradedChecks++
    const local = new Array<BucketCharge>(charges.length)
    let seededEnds: number[] | null = null
    for (let i = 0; i < charges.length; i++) {
      const c = charges[i]
      const seed = this.seeds.get(c.key)
      const seeded = seed !== undefined && seed.endsAt > now
      local[i] = {
        // Keys never hold a NUL (keys.ts), so the seeded key cannot be any other bucket's.
        key: seeded ? `${c.key}\0${String(seed.window)}` : c.key,
        kind: c.kind,
        name: c.name,
        // The loop breaker is not shared out: it catches one identity repeating one call, and divided
        // below 1 it would refuse every call, even a first one. A loop spread over N replicas is still
        // stopped, at N × its limit.
        limit: Math.floor((seeded ? Math.max(0, c.limit - seed.used) : c.limit) / (c.kind === 'repeat' ? 1 : n)),
        windowSeconds: c.windowSeconds,
        cost: c.cost,
        charged: c.charged,
      }
      if (seeded) (seededEnds ??= new Array<number>(charges.length).fill(Infinity))[i] = seed.endsAt
    }
    let result = this.counter.admitNow(local)
    if (result.admitted) {
      this.admissions++
      for (let i = 0; i < local.length; i++) {
        if (!local[i].charged) continue
        const window = result.buckets[i].window
        const openUntil = Math.min(seededEnds === null ? Infinity : seededEnds[i], typeof window === 'number' ? window : Infinity)
        this.addPending(local[i], charges[i].key, window, openUntil, now)
      }
    }
    // A seeded bucket's count resets when the shared window ends, before the local window would.
    if (seededEnds !== null) result = withSharedResets(result, seededEnds, now)
    return new LocalAdmission(result, local, this.counter, charges)
  }

  /** Takes back a degraded call the upstream never served, from the local counts only. */
  refund(admission: LocalAdmission): void {
    // Its counter was replaced: its units were handed to the store already, and stay counted there.
    if (admission.counter !== this.counter || !admission.result.admitted) return
    void admission.counter.refund(admission.local, admission.result)
    for (let i = 0; i < admission.local.length; i++) {
      const c = admission.local[i]
      if (!c.charged) continue
      // Units a statement carries now stay counted: the refund cannot reach them any more.
      const p = this.pending.get(admission.shared[i].key)
      if (p !== undefined && p.localKey === c.key && p.window === admission.result.buckets[i].window)
        p.count = Math.max(0, p.count - c.cost)
    }
  }

  /**
   * The units waiting for the buckets `keys` (every one of them) and for up to `more` other buckets,
   * merged per shared bucket, for the statement about to judge checks of `keys`; they are in flight
   * until `landed` or `failed`. Null when none waits, or while another statement carries units (the
   * store sends no second one beside it). Units of windows that have ended are dropped.
   */
  take(keys: readonly string[], more: number): LocalCount[] | null {
    // Nothing settles here: the statement may still fail, and the store may still be down (landed settles).
    if (this.inFlight !== null || this.pending.size === 0) return null
    const now = this.now()
    const taken = new Map<string, Pending>()
    for (const key of keys) this.takeOne(key, taken, now)
    let extra = 0
    for (const key of this.pending.keys()) {
      if (extra >= more) break
      if (this.takeOne(key, taken, now)) extra++
    }
    if (taken.size === 0) return null
    this.inFlight = taken
    const counts: LocalCount[] = []
    for (const [key, p] of taken) counts.push({ key, count: p.count, windowSeconds: p.windowSeconds })
    return counts
  }

  /**
   * The statement carrying the units taken committed (or one carrying none succeeded): the shared
   * counts hold them. The remembered counts, read before, now include them too (without this a store
   * failing again before the bucket's next shared check would hand the share out twice). Once nothing
   * waits, the local counter starts afresh: the shared counts are authoritative again.
   */
  landed(): number {
    const taken = this.inFlight
    this.inFlight = null
    let units = 0
    if (taken !== null) {
      const now = this.now()
      for (const [key, p] of taken) {
        units += p.count
        const seed = this.seeds.get(key)
        if (seed !== undefined && seed.endsAt > now) seed.used += p.count
      }
    }
    this.settled()
    return units
  }

  /** The statement carrying the units taken failed, or its answer never came: they wait again, never counted twice here. */
  failed(): void {
    const taken = this.inFlight
    if (taken === null) return
    this.inFlight = null
    const now = this.now()
    for (const [key, p] of taken) {
      if (p.openUntil <= now) continue
      const current = this.pending.get(key)
      if (current === undefined) this.pending.set(key, p)
      else if (current.localKey === p.localKey && current.window === p.window) current.count += p.count
      // else: the local window changed since, so the one taken has ended
    }
  }

  /** Moves the units waiting for `key` to `taken`; false when none (or only ended ones) wait. */
  private takeOne(key: string, taken: Map<string, Pending>, now: number): boolean {
    const p = this.pending.get(key)
    if (p === undefined) return false
    this.pending.delete(key)
    if (p.openUntil <= now || p.count === 0) return false
    taken.set(key, p)
    return true
  }

  /** Nothing waits and nothing is in flight: the local counts start afresh. */
  private settled(): void {
    if (this.degradedChecks > 0 && this.pending.size === 0 && this.inFlight === null) {
      this.counter = new MemoryBudgetStore({ now: this.now })
      this.degradedChecks = 0
    }
  }

  private addPending(c: BucketCharge, sharedKey: string, window: WindowId, openUntil: number, now: number): void {
    const p = this.pending.get(sharedKey)
    if (p !== undefined && p.localKey === c.key && p.window === window) {
      p.count += c.cost
      return
    }
    // Another local key or window for the bucket: the units before it stay waiting if their window is
    // still open (a refund then no longer finds them: erring towards refusing), else they are dropped.
    const carried = p !== undefined && p.openUntil > now ? p.count : 0
    if (p === undefined && this.pending.size >= this.maxKeys) this.prunePending(now)
    this.pending.set(sharedKey, {
      localKey: c.key,
      kind: c.kind,
      windowSeconds: c.windowSeconds,
      window,
      openUntil,
      count: c.cost + carried,
    })
  }

  /**
   * Full: forgets the counts of ended windows, then the oldest live ones down to nine tenths of the cap,
   * identity and repeat entries before tool, server and tenant ones (their units are never handed over: the
   * shared count ends up lower by them). So a scan costs one
   * pass per tenth of the cap inserted, never one per insert.
   */
  private prunePending(now: number): void {
    for (const [key, p] of this.pending) if (p.openUntil <= now) this.pending.delete(key)
    let drop = this.pending.size - Math.floor(this.maxKeys * 0.9)
    // A caller minting new keys (identities, repeat arguments) must not push a shared bucket out: tool,
    // server and tenant entries go last, only if nothing else is left to drop (the cap holds whatever happens).
    for (const shared of [false, true]) {
      for (const [key, p] of this.pending) {
        if (drop <= 0) return
        if ((p.kind === 'tool' || p.kind === 'server' || p.kind === 'tenant') !== shared) continue
        this.pending.delete(key)
        drop--
      }
    }
  }
}

/** The result with each seeded bucket's reset at the shared window's end when that comes first. */
function withSharedResets(result: AdmitResult, endsAt: readonly number[], now: number): AdmitResult {
  const buckets = result.buckets.map((b: BucketState, i: number): BucketState => {
    const shared = (endsAt[i] - now) / 1000
    return shared < b.resetSeconds ? { remaining: b.remaining, resetSeconds: shared, window: b.window } : b
  })
  return { admitted: result.admitted, buckets, refusedBy: result.refusedBy }
}
