import { checkPrincipal } from './principal'

/** One revoked identity (or, with identity `*`, a whole tenant), as listed and as stored. */
export interface Revocation {
  identity: string
  tenant: string
  /** ISO 8601; null: until removed. */
  until: string | null
  /** ISO 8601: when the revocation was made (or last replaced). */
  created_at: string
  reason?: string
}

export interface RevocationRequest {
  identity: string
  tenant: string
  /** When the revocation stops applying; null: until removed. Must lie in the future. */
  until: Date | null
  reason?: string
}

/**
 * The identities refused with 401 whatever their token says (docs/operations.md, section revocation).
 *
 * `isRevoked` is on the request path: synchronous, one Map lookup on a view held in memory (read
 * `size` first: an empty list then costs one property read). The other methods are for operators
 * (the admin API); `revoke` and `remove` apply to this replica's view as soon as they resolve, and
 * with shared storage reach the other replicas at their next refresh (within a second).
 *
 * Matching is exact (case-sensitive, byte for byte, as budgets and policy match principals).
 * Identity `*` revokes every identity of its tenant. An entry whose `until` has passed stops applying
 * at once (judged by `nowMs`) and is removed from the view and the storage soon after.
 */
export interface RevocationList {
  /** Entries in this replica's view (expired ones included until they are cleaned up). */
  readonly size: number
  isRevoked(tenant: string, identity: string, nowMs: number): boolean
  /** The revocation that applies (the identity's own first, then its tenant's `*`), or null. */
  find(tenant: string, identity: string, nowMs: number): Revocation | null
  /** Adds the revocation, or replaces the one of the same (tenant, identity). Rejects bad input with RevocationInputError. */
  revoke(r: RevocationRequest): Promise<Revocation>
  /** Every revocation still in force, sorted by tenant then identity. */
  list(): Promise<Revocation[]>
  /** Resolves false when there was no such revocation. */
  remove(identity: string, tenant: string): Promise<boolean>
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
 * Why a revocation request is unacceptable, or null. Identity and tenant follow the auth stage's rules
 * for principals (checkPrincipal): a value no token can carry could never match, so accepting it would
 * only hide a typo. `now` is the caller's clock, for `until`.
 */
export function checkRevocationInput(r: RevocationRequest, nowMs = Date.now()): string | null {
  if (typeof r.identity !== 'string') return 'identity must be a string'
  if (typeof r.tenant !== 'string') return 'tenant must be a string'
  const identity = r.identity === ALL_IDENTITIES ? null : checkPrincipal('identity', r.identity)
  const problem = identity ?? checkPrincipal('tenant', r.tenant)
  if (problem !== null) return problem
  if (r.until !== null) {
    if (!(r.until instanceof Date) || Number.isNaN(r.until.getTime())) return 'until must be a date (ISO 8601) or null'
    if (r.until.getTime() <= nowMs) return `until (${r.until.toISOString()}) is not in the future: the revocation would never apply`
  }
  if (r.reason !== undefined) return reasonProblem(r.reason)
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

/** One entry of the view: the listed form plus its end as a number, for the hot path. */
export interface ViewEntry {
  readonly revocation: Revocation
  /** Epoch ms; Infinity when it has no end. */
  readonly untilMs: number
}

export function viewEntry(revocation: Revocation): ViewEntry {
  return { revocation, untilMs: revocation.until === null ? Infinity : Date.parse(revocation.until) }
}

/**
 * The revocations this replica applies: tenant → identity → entry. Nested maps rather than one joined
 * key: no string is built per request, and no (tenant, identity) pair can collide with another
 * whatever the strings hold.
 */
export class RevocationView {
  private byTenant = new Map<string, Map<string, ViewEntry>>()
  private count = 0
  /**
   * No entry ends before this (epoch ms; may be early after a delete, never late): prune() scans only
   * once it has passed, so /readyz and /metrics (no token needed) cost O(1), not O(entries), per call.
   */
  private earliestUntilMs = Infinity

  get size(): number {
    return this.count
  }

  find(tenant: string, identity: string, nowMs: number): ViewEntry | null {
    const identities = this.byTenant.get(tenant)
    if (identities === undefined) return null
    const own = this.live(identities, identity, nowMs)
    return own ?? this.live(identities, ALL_IDENTITIES, nowMs)
  }

  /** The entry for `identity` if still in force; an expired one is dropped on the way. */
  private live(identities: Map<string, ViewEntry>, identity: string, nowMs: number): ViewEntry | null {
    const entry = identities.get(identity)
    if (entry === undefined) return null
    if (entry.untilMs > nowMs) return entry
    this.delete(entry.revocation.tenant, identity)
    return null
  }

  set(entry: ViewEntry): void {
    const { tenant, identity } = entry.revocation
    let identities = this.byTenant.get(tenant)
    if (identities === undefined) this.byTenant.set(tenant, (identities = new Map<string, ViewEntry>()))
    if (!identities.has(identity)) this.count++
    identities.set(identity, entry)
    if (entry.untilMs < this.earliestUntilMs) this.earliestUntilMs = entry.untilMs
  }

  delete(tenant: string, identity: string): boolean {
    const identities = this.byTenant.get(tenant)
    if (identities === undefined || !identities.delete(identity)) return false
    this.count--
    if (identities.size === 0) this.byTenant.delete(tenant)
    return true
  }

  /** Replaces every entry at once (a refresh from shared storage). */
  replace(entries: readonly ViewEntry[]): void {
    const next = new RevocationView()
    for (const e of entries) next.set(e)
    this.byTenant = next.byTenant
    this.count = next.count
    this.earliestUntilMs = next.earliestUntilMs
  }

  /** Drops the entries whose end has passed; returns how many are left. */
  prune(nowMs: number): number {
    if (nowMs < this.earliestUntilMs) return this.count
    let earliest = Infinity
    for (const identities of this.byTenant.values()) {
      for (const entry of identities.values()) {
        if (entry.untilMs <= nowMs) this.delete(entry.revocation.tenant, entry.revocation.identity)
        else if (entry.untilMs < earliest) earliest = entry.untilMs
      }
    }
    this.earliestUntilMs = earliest
    return this.count
  }

  /** Every entry in force, sorted by tenant then identity (code unit order, as the database's "C" collation). */
  list(nowMs: number): Revocation[] {
    this.prune(nowMs)
    const out: Revocation[] = []
    for (const identities of this.byTenant.values()) for (const e of identities.values()) out.push(e.revocation)
    return out.sort((a, b) => compare(a.tenant, b.tenant) || compare(a.identity, b.identity))
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** The revocation as listed: ISO times, `reason` only when one was given. */
export function revocationOf(r: RevocationRequest, createdAtMs: number): Revocation {
  return {
    identity: r.identity,
    tenant: r.tenant,
    until: r.until === null ? null : r.until.toISOString(),
    created_at: new Date(createdAtMs).toISOString(),
    ...(r.reason === undefined ? {} : { reason: r.reason }),
  }
}

/** The request-path half of every list: lookups on the view this replica holds in memory. */
export abstract class ViewedRevocations {
  protected readonly view = new RevocationView()

  get size(): number {
    return this.view.size
  }

  isRevoked(tenant: string, identity: string, nowMs: number): boolean {
    return this.view.size !== 0 && this.view.find(tenant, identity, nowMs) !== null
  }

  find(tenant: string, identity: string, nowMs: number): Revocation | null {
    return this.view.size === 0 ? null : (this.view.find(tenant, identity, nowMs)?.revocation ?? null)
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

  remove(identity: string, tenant: string): Promise<boolean> {
    // Only the exact entry (removing alice leaves a tenant-wide `*` in force); one already expired counts as absent.
    this.view.prune(this.now())
    return Promise.resolve(this.view.delete(tenant, identity))
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
