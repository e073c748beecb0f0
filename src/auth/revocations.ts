import type { Principal } from '../pipeline/exchange'
import { hasControlCharacters } from '../pipeline/exchange'
import { checkPrincipal } from './principal'

/**
 * The three kinds of revocation (docs/operations.md, section revocation):
 *  - `identity`: every token of (tenant, identity) (identity `*`: every identity of the tenant);
 *  - `jti`: the one token whose `jti` claim is this string, whoever holds it;
 *  - `issued_before`: every token of (tenant, identity) (or `*`) whose `iat` is before a time, so a
 *    leaked token stops working and one minted after that time works.
 */
export type RevocationKind = 'identity' | 'jti' | 'issued_before'

interface Listed {
  /** ISO 8601; null: until removed. */
  until: string | null
  /** ISO 8601: when the revocation was made (or last replaced). */
  created_at: string
  reason?: string
}

/** One revocation, as listed and as stored. */
export type Revocation =
  | ({ kind: 'identity'; identity: string; tenant: string } & Listed)
  | ({ kind: 'jti'; jti: string } & Listed)
  | ({ kind: 'issued_before'; identity: string; tenant: string; /** ISO 8601 */ issued_before: string } & Listed)

/** What names one revocation (to remove it): each kind has at most one entry per target. */
export type RevocationTarget =
  | { readonly kind?: 'identity'; readonly identity: string; readonly tenant: string }
  | { readonly kind: 'jti'; readonly jti: string }
  | { readonly kind: 'issued_before'; readonly identity: string; readonly tenant: string }

export type RevocationRequest = (
  | { readonly kind?: 'identity'; readonly identity: string; readonly tenant: string }
  | { readonly kind: 'jti'; readonly jti: string }
  | {
      readonly kind: 'issued_before'
      readonly identity: string
      readonly tenant: string
      /** Tokens whose `iat` is before this are refused; not in the future. */
      readonly issuedBefore: Date
    }
) & {
  /** When the revocation stops applying; null: until removed. Must lie in the future. */
  readonly until: Date | null
  readonly reason?: string
}

/**
 * The revocations refused with 401 whatever their token's signature says (docs/operations.md, section
 * revocation).
 *
 * `isRevoked` and `find` are on the request path: synchronous, a few Map lookups on a view held in
 * memory (read `size` first: an empty list then costs one property read). The other methods are for
 * operators (the admin API); `revoke` and `remove` apply to this replica's view as soon as they resolve,
 * and with shared storage reach the other replicas at their next refresh (within a second).
 *
 * Matching is exact (case-sensitive, byte for byte, as budgets and policy match principals; a `jti` as
 * signed). Identity `*` stands for every identity of its tenant. An entry whose `until` has passed stops
 * applying at once (judged by `nowMs`) and is removed from the view and the storage soon after.
 */
export interface RevocationList {
  /** Entries in this replica's view (expired ones included until they are cleaned up). */
  readonly size: number
  isRevoked(principal: Principal, nowMs: number): boolean
  /**
   * The revocation that refuses this principal, or null: the identity's own, then its tenant's `*`, then
   * one of its token's `jti`, then an issued-before one (own, then `*`) its token's `iat` falls under.
   */
  find(principal: Principal, nowMs: number): Revocation | null
  /** Adds the revocation, or replaces the one of the same target. Rejects bad input with RevocationInputError. */
  revoke(r: RevocationRequest): Promise<Revocation>
  /** Every revocation still in force, sorted (sortRevocations). */
  list(): Promise<Revocation[]>
  /** Resolves false when there was no such revocation. */
  remove(target: RevocationTarget): Promise<boolean>
  /** The /readyz fields: `revocations` (`ok`, or `stale` when the shared list could not be refreshed), counts, age. */
  details(): Record<string, unknown>
  close(): Promise<void>
}

/** Identity that stands for every identity of its tenant. */
export const ALL_IDENTITIES = '*'

/** Longest operator note kept with a revocation. */
export const MAX_REASON_CHARS = 1024

/** Input an operator can correct (the admin API answers it with 400 and this message). */
export class RevocationInputError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'RevocationInputError'
  }
}

/**
 * Longest `jti` a revocation names. Token ids are UUIDs or shorter in practice; the bound keeps a
 * pasted token (three segments, hundreds of bytes) from being stored as one by mistake.
 */
export const MAX_JTI_BYTES = 256

/**
 * How far in the future `issued_before` may lie: room for `--issued-before now` read on the operator's
 * clock, a little ahead of the gateway's. Further ahead, it would refuse tokens not minted yet.
 */
export const ISSUED_BEFORE_SKEW_MS = 60_000

/**
 * Why a revocation request is unacceptable, or null. Identity and tenant follow the auth stage's rules
 * for principals (checkPrincipal): a value no token can carry could never match, so accepting it would
 * only hide a typo. `now` is the caller's clock, for `until` and `issued_before`.
 */
export function checkRevocationInput(r: RevocationRequest, nowMs = Date.now()): string | null {
  const target = targetProblem(r)
  if (target !== null) return target
  if (r.kind === 'issued_before') {
    const before = r.issuedBefore
    if (!(before instanceof Date) || Number.isNaN(before.getTime())) return 'issued_before must be a date (ISO 8601)'
    if (before.getTime() > nowMs + ISSUED_BEFORE_SKEW_MS) {
      return `issued_before (${before.toISOString()}) is in the future: it would refuse tokens not minted yet (use the current time)`
    }
  }
  if (r.until !== null) {
    if (!(r.until instanceof Date) || Number.isNaN(r.until.getTime())) return 'until must be a date (ISO 8601) or null'
    if (r.until.getTime() <= nowMs) return `until (${r.until.toISOString()}) is not in the future: the revocation would never apply`
  }
  if (r.reason !== undefined) return reasonProblem(r.reason)
  return null
}

/** Why a target (what a revocation names) is unacceptable, or null. */
export function targetProblem(t: RevocationTarget): string | null {
  if (t.kind === 'jti') return jtiProblem(t.jti)
  if (t.kind !== undefined && t.kind !== 'identity' && t.kind !== 'issued_before') return 'kind must be identity, jti or issued_before'
  if (typeof t.identity !== 'string') return 'identity must be a string'
  if (typeof t.tenant !== 'string') return 'tenant must be a string'
  return (t.identity === ALL_IDENTITIES ? null : checkPrincipal('identity', t.identity)) ?? checkPrincipal('tenant', t.tenant)
}

/** With the u flag a surrogate pair is one code point, so only an unpaired half matches. */
const LONE_SURROGATE = /\p{Surrogate}/u

/**
 * Why a `jti` to revoke is unacceptable, or null: 1 to MAX_JTI_BYTES bytes of printable text with no
 * whitespace at its ends. A token whose `jti` breaks these rules cannot be revoked by jti (revoke its
 * identity, or its tokens issued before a time); refusing such input catches a paste that took a line
 * break or a space along.
 */
export function jtiProblem(jti: unknown): string | null {
  if (typeof jti !== 'string') return 'jti must be a string'
  if (jti.length === 0) return 'jti is empty'
  if (Buffer.byteLength(jti) > MAX_JTI_BYTES) return `jti is longer than ${MAX_JTI_BYTES} bytes`
  if (hasControlCharacters(jti)) return 'jti contains control characters'
  if (jti.trim() !== jti) return 'jti has leading or trailing whitespace'
  if (LONE_SURROGATE.test(jti)) return 'jti is not well-formed Unicode'
  return null
}

/**
 * Every control character (C0 with TAB and LF, DEL, C1: U+0085 is a line break, U+009B starts a
 * terminal escape sequence) and the line and paragraph separators. A reason is one line an operator
 * reads in `wardline revoke --list` and in the audit trail: a line break in it forged a second row.
 */
// eslint-disable-next-line no-control-regex
const REASON_UNSAFE = /[\x00-\x1f\x7f-\x9f\u2028\u2029]/

/**
 * Why a revocation's `reason` is unacceptable, or null: too long, or holding a character that breaks
 * its one line (named by code point and position, so the operator can find it). The admin API answers
 * it with 400; `wardline revoke --reason` checks it before calling the API.
 */
export function reasonProblem(reason: unknown): string | null {
  if (typeof reason !== 'string') return 'reason must be a string'
  if (reason.length > MAX_REASON_CHARS) return `reason is longer than ${MAX_REASON_CHARS} characters`
  const found = REASON_UNSAFE.exec(reason)
  if (found === null) return null
  const code = found[0].charCodeAt(0)
  const name = `U+${code.toString(16).toUpperCase().padStart(4, '0')}`
  const what =
    code === 0x0a || code === 0x0d || code === 0x85 || code === 0x2028 || code === 0x2029 ? 'a line break' : 'a control character'
  return `reason contains ${what} (${name}) at character ${found.index + 1}: a reason is one line of printable text`
}

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

/** The revocation as listed: its kind and target, ISO times, `reason` only when one was given. */
export function revocationOf(r: RevocationRequest, createdAtMs: number): Revocation {
  const listed: Listed = {
    until: r.until === null ? null : r.until.toISOString(),
    created_at: new Date(createdAtMs).toISOString(),
    ...(r.reason === undefined ? {} : { reason: r.reason }),
  }
  if (r.kind === 'jti') return { kind: 'jti', jti: r.jti, ...listed }
  if (r.kind === 'issued_before') {
    return { kind: 'issued_before', identity: r.identity, tenant: r.tenant, issued_before: r.issuedBefore.toISOString(), ...listed }
  }
  return { kind: 'identity', identity: r.identity, tenant: r.tenant, ...listed }
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

/**
 * Revocations kept in this process only: each replica has its own list, and a restart forgets it
 * (features.postgres_storage shares them and keeps them).
 */
export class MemoryRevocationList extends ViewedRevocations implements RevocationList {
  constructor(private readonly now: () => number = Date.now) {
    super()
  }

  revoke(r: RevocationRequest): Promise<Revocation> {
    const nowMs = this.now()
    const problem = checkRevocationInput(r, nowMs)
    if (problem !== null) return Promise.reject(new RevocationInputError(problem))
    const revocation = revocationOf(r, nowMs)
    this.view.set(viewEntry(revocation))
    this.view.prune(nowMs)
    return Promise.resolve(revocation)
  }

  list(): Promise<Revocation[]> {
    return Promise.resolve(this.view.list(this.now()))
  }

  remove(target: RevocationTarget): Promise<boolean> {
    // Only the exact entry (removing alice leaves a tenant-wide `*` in force); one already expired counts as absent.
    this.view.prune(this.now())
    return Promise.resolve(this.view.delete(target))
  }

  details(): Record<string, unknown> {
    return { revocations: 'ok', revocations_storage: 'memory', revocations_active: this.view.prune(this.now()) }
  }

  /** For the metrics: entries in force; a list in memory is never stale. */
  stats(): { active: number; staleSeconds: number } {
    return { active: this.view.prune(this.now()), staleSeconds: 0 }
  }

  close(): Promise<void> {
    return Promise.resolve()
  }
}
