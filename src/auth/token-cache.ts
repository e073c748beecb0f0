import { LinkedList } from '../linked-list'
import type { Principal } from '../pipeline/exchange'

/** One cached token, and its place in the recency list. */
class Entry {
  /** The entry used just before this one (null for the least recently used). */
  listPrev: Entry | null = null
  /** The entry used just after this one (null for the most recently used). */
  listNext: Entry | null = null

  constructor(
    readonly key: string,
    /** The entry's key in the Map: the key's last SLOT_CHARS characters. */
    readonly slot: string,
    readonly principal: Principal,
    /** Epoch ms of the token's `exp`: the entry is dead from then on, whatever the clock tolerance. */
    readonly expiresAt: number,
  ) {}
}

/**
 * Entries are found by the last 16 characters of their key and confirmed by the whole key. A Map hashes
 * its whole key on every lookup, and every request brings its header as a new string: V8 (Node 20) hashes
 * a 180-character header one character at a time, ~0.4 µs, most of the cost of a hit; hashing 16 and
 * comparing the rest costs ~0.1 µs. A cached key ends with a verified token's signature, so those 16
 * characters are 96 bits nobody can choose without the signing key. Two keys sharing them do not happen
 * in practice, and if they did the later would replace the earlier (one verification more): a lookup
 * only ever answers for the whole key it was given.
 */
const SLOT_CHARS = 16

/**
 * Verified tokens, keyed by the exact string the caller's check was made on, so a client that reuses
 * its token pays the signature check once. Bounded (least recently used goes first) and never serves
 * a token past its `exp`. Only tokens that carry an `exp` are kept: without one there is no safe lifetime.
 *
 * Keying by the whole string is sound because the string is what was verified: any other byte makes
 * another key, which misses and is verified in full. JwtAuthenticator keys an entry by the canonical
 * header, `Bearer <token>`, and refuses every spelling of a token but the canonical one before verifying
 * (isNonCanonicalJws), so one signed token is one key, and a caller cannot fill the cache (or force a
 * verification per request) with copies.
 *
 * A hit writes no Map: recency is a linked list through the entries (linked-list.ts: moving an entry to
 * the newest end writes a few pointers, no allocation), and the Map only gains a key on insert and loses one on eviction
 * or expiry. Re-inserting into the Map on every hit (the insertion-order LRU this replaces) cost a
 * delete and a set per request and left the table full of deleted slots, rebuilt every few requests.
 * An access stamp with approximate eviction would also keep the Map still, but would need a scan (or
 * sampling) to find a victim and would no longer evict exactly the least recently used.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>()
  /** Least recently used first. */
  private readonly recency = new LinkedList<Entry>()

  constructor(
    private readonly maxEntries: number,
    private readonly now: () => number = Date.now,
  ) {}

  get size(): number {
    return this.entries.size
  }

  get(key: string): Principal | undefined {
    const entry = this.entries.get(key.slice(-SLOT_CHARS))
    if (entry === undefined || entry.key !== key) return undefined
    if (this.now() >= entry.expiresAt) {
      this.remove(entry)
      return undefined
    }
    // A client that keeps sending one token finds it first already: nothing to write.
    if (this.recency.newest !== entry) {
      this.recency.remove(entry)
      this.recency.push(entry)
    }
    return entry.principal
  }

  /** `expSeconds` is the token's `exp` claim; tokens without one are not cached. */
  set(key: string, principal: Principal, expSeconds: number | undefined): void {
    if (this.maxEntries === 0 || expSeconds === undefined) return
    const expiresAt = expSeconds * 1000
    if (this.now() >= expiresAt) return
    const slot = key.slice(-SLOT_CHARS)
    // The same key, or (see SLOT_CHARS) another that ends like it.
    const previous = this.entries.get(slot)
    if (previous !== undefined) this.remove(previous)
    const entry = new Entry(key, slot, principal, expiresAt)
    this.entries.set(slot, entry)
    this.recency.push(entry)
    // Evict the least recently used; expired entries are dropped lazily when they are looked up or evicted.
    const oldest = this.recency.oldest
    if (this.entries.size > this.maxEntries && oldest !== null) this.remove(oldest)
  }

  clear(): void {
    this.entries.clear()
    this.recency.clear()
  }

  private remove(entry: Entry): void {
    this.entries.delete(entry.slot)
    this.recency.remove(entry)
  }
}
