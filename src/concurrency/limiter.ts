/**
 * Requests in flight per key (one key per tenant + identity), capped at `maxPerKey`.
 *
 * Contract:
 * - `tryAcquire(key, limit)` either takes one slot and returns true, or takes nothing and returns false
 *   when the key already holds `limit` slots (`maxPerKey` unless a caller allows more).
 * - Every successful `tryAcquire` is followed by exactly one `release(key)` (the Gateway does it when
 *   the request's audit record is written, whatever path the request took). A release with no slot
 *   held is a bug; it is ignored rather than let a count go negative.
 * - An entry exists only while its count is above 0, so the map never holds more keys than there are
 *   requests in flight: an identity seen once and gone costs nothing afterwards.
 *
 * In memory and per process: the point is the upstream sockets and memory of this replica, not a
 * cluster-wide quota (that is the budget's job).
 */
export class ConcurrencyLimiter {
  private readonly counts = new Map<string, number>()

  constructor(readonly maxPerKey: number) {}

  /** Keys holding at least one slot. */
  get size(): number {
    return this.counts.size
  }

  /** Slots `key` holds now (0 when none). */
  inFlight(key: string): number {
    return this.counts.get(key) ?? 0
  }

  tryAcquire(key: string, limit = this.maxPerKey): boolean {
    const held = this.counts.get(key) ?? 0
    if (held >= limit) return false
    this.counts.set(key, held + 1)
    return true
  }

  release(key: string): void {
    const held = this.counts.get(key)
    if (held === undefined) return
    if (held <= 1) this.counts.delete(key)
    else this.counts.set(key, held - 1)
  }
}

/**
 * The limiter key of (tenant, identity): the tenant's length first, so no two pairs share a key
 * whatever the strings hold (`("acme:", "x")` and `("acme", ":x")` differ). The encoding is this
 * folder's own; budget keys are built elsewhere and never compared with these.
 */
export function concurrencyKey(tenant: string, identity: string): string {
  return `${tenant.length}:${tenant}${identity}`
}
