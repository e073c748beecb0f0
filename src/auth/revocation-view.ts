import type { Principal } from '../pipeline/exchange'
import type { Revocation, RevocationKind, RevocationTarget } from './revocations'

/**
 * The revocations a replica holds in memory and judges requests against (revocations.ts has the
 * kinds, the list interface and the input rules; revocations-postgres.ts refreshes a view from the
 * shared tables).
 */

/** Identity that stands for every identity of its tenant. */
export const ALL_IDENTITIES = '*'

/** One entry of the view: the listed form plus its times as numbers, for the hot path. */
export interface ViewEntry {
  readonly revocation: Revocation
  /** Epoch ms; Infinity when it has no end. */
  readonly untilMs: number
  /** Epoch ms of `issued_before` (tokens with an earlier `iat` are refused); NaN for the other kinds. */
  readonly issuedBeforeMs: number
}

export function viewEntry(revocation: Revocation): ViewEntry {
  return {
    revocation,
    untilMs: revocation.until === null ? Infinity : Date.parse(revocation.until),
    issuedBeforeMs: revocation.kind === 'issued_before' ? Date.parse(revocation.issued_before) : NaN,
  }
}

/**
 * Whether an issued-before revocation refuses a token issued at `issuedAt` (seconds, the `iat` claim).
 * A token without `iat` (and every header-mode request) is refused: nothing shows it was issued after
 * the leak, and a gateway that let it through would make the revocation useless against tokens minted
 * without `iat` (docs/operations.md, section revocation).
 */
export function issuedBeforeApplies(issuedBeforeMs: number, issuedAt: number | null | undefined): boolean {
  return issuedAt === null || issuedAt === undefined || issuedAt * 1000 < issuedBeforeMs
}

/**
 * Entries keyed by (tenant, identity): tenant → identity → entry. Nested maps rather than one joined
 * key: no string is built per request, and no (tenant, identity) pair can collide with another
 * whatever the strings hold.
 */
class PrincipalMap {
  private readonly byTenant = new Map<string, Map<string, ViewEntry>>()
  size = 0

  get(tenant: string, identity: string): ViewEntry | undefined {
    return this.byTenant.get(tenant)?.get(identity)
  }

  /** Returns true when the entry is new (not a replacement). */
  set(tenant: string, identity: string, entry: ViewEntry): boolean {
    let identities = this.byTenant.get(tenant)
    if (identities === undefined) this.byTenant.set(tenant, (identities = new Map<string, ViewEntry>()))
    const added = !identities.has(identity)
    if (added) this.size++
    identities.set(identity, entry)
    return added
  }

  delete(tenant: string, identity: string): boolean {
    const identities = this.byTenant.get(tenant)
    if (identities === undefined || !identities.delete(identity)) return false
    this.size--
    if (identities.size === 0) this.byTenant.delete(tenant)
    return true
  }

  *values(): IterableIterator<ViewEntry> {
    for (const identities of this.byTenant.values()) yield* identities.values()
  }
}

/** The kinds in the order lists show them. */
const KIND_ORDER: Readonly<Record<RevocationKind, number>> = { identity: 0, issued_before: 1, jti: 2 }

/**
 * The revocations this replica applies: identity and issued-before entries by (tenant, identity), jti
 * entries by token id. Each kind has its own map, so a principal costs one lookup per kind that has
 * entries, and a kind with none costs one property read.
 */
export class RevocationView {
  private identities = new PrincipalMap()
  private issuedBefore = new PrincipalMap()
  private tokens = new Map<string, ViewEntry>()
  /**
   * No entry ends before this (epoch ms; may be early after a delete, never late): prune() scans only
   * once it has passed, so /readyz and /metrics (no token needed) cost O(1), not O(entries), per call.
   */
  private earliestUntilMs = Infinity

  get size(): number {
    return this.identities.size + this.issuedBefore.size + this.tokens.size
  }

  find(principal: Principal, nowMs: number): ViewEntry | null {
    const { tenant, identity } = principal
    if (this.identities.size !== 0) {
      const found = this.livePair(this.identities, tenant, identity, nowMs) ?? this.livePair(this.identities, tenant, ALL_IDENTITIES, nowMs)
      if (found !== null) return found
    }
    const jti = principal.tokenId
    if (this.tokens.size !== 0 && jti !== null && jti !== undefined) {
      const found = this.tokens.get(jti)
      if (found !== undefined && this.alive(found, nowMs)) return found
    }
    if (this.issuedBefore.size !== 0) {
      // Both are checked: the identity's own may name an earlier time than its tenant's `*`.
      const own = this.livePair(this.issuedBefore, tenant, identity, nowMs)
      if (own !== null && issuedBeforeApplies(own.issuedBeforeMs, principal.issuedAt)) return own
      const all = this.livePair(this.issuedBefore, tenant, ALL_IDENTITIES, nowMs)
      if (all !== null && issuedBeforeApplies(all.issuedBeforeMs, principal.issuedAt)) return all
    }
    return null
  }

  /** The entry for (tenant, identity) if still in force; an expired one is dropped on the way. */
  private livePair(map: PrincipalMap, tenant: string, identity: string, nowMs: number): ViewEntry | null {
    const entry = map.get(tenant, identity)
    return entry !== undefined && this.alive(entry, nowMs) ? entry : null
  }

  private alive(entry: ViewEntry, nowMs: number): boolean {
    if (entry.untilMs > nowMs) return true
    this.delete(entry.revocation)
    return false
  }

  set(entry: ViewEntry): void {
    const r = entry.revocation
    if (r.kind === 'jti') this.tokens.set(r.jti, entry)
    else (r.kind === 'identity' ? this.identities : this.issuedBefore).set(r.tenant, r.identity, entry)
    if (entry.untilMs < this.earliestUntilMs) this.earliestUntilMs = entry.untilMs
  }

  delete(target: RevocationTarget): boolean {
    if (target.kind === 'jti') return this.tokens.delete(target.jti)
    return (target.kind === 'issued_before' ? this.issuedBefore : this.identities).delete(target.tenant, target.identity)
  }

  /** Replaces every entry at once (a refresh from shared storage). */
  replace(entries: readonly ViewEntry[]): void {
    const next = new RevocationView()
    for (const e of entries) next.set(e)
    this.identities = next.identities
    this.issuedBefore = next.issuedBefore
    this.tokens = next.tokens
    this.earliestUntilMs = next.earliestUntilMs
  }

  /** Drops the entries whose end has passed; returns how many are left. */
  prune(nowMs: number): number {
    if (nowMs < this.earliestUntilMs) return this.size
    let earliest = Infinity
    for (const entry of this.entries()) {
      if (entry.untilMs <= nowMs) this.delete(entry.revocation)
      else if (entry.untilMs < earliest) earliest = entry.untilMs
    }
    this.earliestUntilMs = earliest
    return this.size
  }

  /** Every entry in force, sorted (sortRevocations). */
  list(nowMs: number): Revocation[] {
    this.prune(nowMs)
    return sortRevocations([...this.entries()].map((e) => e.revocation))
  }

  /** A snapshot of every entry (prune() deletes while it walks it). */
  private entries(): ViewEntry[] {
    return [...this.identities.values(), ...this.issuedBefore.values(), ...this.tokens.values()]
  }
}

/**
 * By kind (identity, issued_before, jti), then tenant, identity and jti in code unit order (the
 * database's "C" collation): one order for both storages.
 */
export function sortRevocations(list: Revocation[]): Revocation[] {
  return list.sort((a, b) => KIND_ORDER[a.kind] - KIND_ORDER[b.kind] || compare(keyOf(a), keyOf(b)) || compare(subKeyOf(a), subKeyOf(b)))
}

function keyOf(r: Revocation): string {
  return r.kind === 'jti' ? r.jti : r.tenant
}

function subKeyOf(r: Revocation): string {
  return r.kind === 'jti' ? '' : r.identity
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** The request-path half of every list: lookups on the view this replica holds in memory. */
export abstract class ViewedRevocations {
  protected readonly view = new RevocationView()

  get size(): number {
    return this.view.size
  }

  isRevoked(principal: Principal, nowMs: number): boolean {
    return this.view.size !== 0 && this.view.find(principal, nowMs) !== null
  }

  find(principal: Principal, nowMs: number): Revocation | null {
    return this.view.size === 0 ? null : (this.view.find(principal, nowMs)?.revocation ?? null)
  }
}
