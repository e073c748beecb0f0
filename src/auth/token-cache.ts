import type { Principal } from '../pipeline/exchange'

interface Entry {
  readonly principal: Principal
  /** Epoch ms of the token's `exp`: the entry is dead from then on, whatever the clock tolerance. */
  readonly expiresAt: number
}

/**
 * Verified tokens, keyed by the token string itself, so a client that reuses its token pays the
 * signature check once. Bounded (least recently used goes first) and never serves a token past its
 * `exp`. Only tokens that carry an `exp` are kept: without one there is no safe lifetime.
 *
 * Keying by the whole string is sound because the string is what was verified: any other byte makes
 * another key, which misses and is verified in full. It is also tight: JwtAuthenticator refuses every
 * spelling of a token but the canonical one before verifying (isNonCanonicalJws), so one signed token
 * is one key, and a caller cannot fill the cache (or force a verification per request) with copies.
 */
export class TokenCache {
  // A Map iterates in insertion order; re-inserting on a hit makes the first key the least recently used.
  private readonly entries = new Map<string, Entry>()

  constructor(
    private readonly maxEntries: number,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.entries.size
  }

  get(token: string): Principal | undefined {
    const entry = this.entries.get(token)
    if (entry === undefined) return undefined
    this.entries.delete(token)
    if (this.now() >= entry.expiresAt) return undefined
    this.entries.set(token, entry)
    return entry.principal
  }

  /** `expSeconds` is the token's `exp` claim; tokens without one are not cached. */
  set(token: string, principal: Principal, expSeconds: number | undefined): void {
    if (this.maxEntries === 0 || expSeconds === undefined) return
    const expiresAt = expSeconds * 1000
    if (this.now() >= expiresAt) return
    this.entries.delete(token)
    this.entries.set(token, { principal, expiresAt })
    if (this.entries.size > this.maxEntries) {
      // Evict the least recently used; expired entries are dropped lazily when they are looked up or evicted.
      const oldest = this.entries.keys().next().value as string
      this.entries.delete(oldest)
    }
  }

  clear(): void {
    this.entries.clear()
  }
}
