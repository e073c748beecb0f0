import type { Principal } from '../pipeline/exchange'
import { hasControlCharacters } from '../pipeline/exchange'
import { checkPrincipal } from './principal'
import { ALL_IDENTITIES, ViewedRevocations, viewEntry } from './revocation-view'

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

export { ALL_IDENTITIES } from './revocation-view'

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
    // No token is issued before the epoch, and Postgres has no year 0 (0000-01-01 would fail as a store error, not a 400).
    if (before.getTime() <= 0) return `issued_before (${before.toISOString()}) is not after 1970-01-01T00:00:00Z: it would refuse nothing`
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
  const problem = (t.identity === ALL_IDENTITIES ? null : checkPrincipal('identity', t.identity)) ?? checkPrincipal('tenant', t.tenant)
  if (problem !== null) return problem
  // The slip jtiProblem catches, made in the other field: a token pasted as the identity or tenant.
  if (looksLikeToken(t.identity) || looksLikeToken(t.tenant))
    return 'identity or tenant is a whole token: name the caller, never paste the token'
  return null
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
  if (looksLikeToken(jti))
    return "jti is a whole token (three base64url segments, a JSON header first): give the token's jti claim, never the token"
  return null
}

/**
 * A compact JWS/JWT (`eyJ` is base64url for `{"`, how every JOSE header starts): what an operator
 * pastes by mistake instead of its `jti`. A short token fits in MAX_JTI_BYTES, and stored as a jti it
 * would sit in the shared table, the list, and the admin audit target: a token must never be kept.
 */
export function looksLikeToken(value: string): boolean {
  return /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(value)
}

/**
 * Every control character (C0 with TAB and LF, DEL, C1: U+0085 is a line break, U+009B starts a
 * terminal escape sequence) and the line and paragraph separators. A reason is one line an operator
 * reads in `wardline revoke --list` and in the audit trail: a line break in it forged a second row.
 */
// eslint-disable-next-line no-control-regex
const REASON_UNSAFE = /[\x00-\x1f\x7f-\x9f\u2028\u2029]/

/** A compact JWS/JWT anywhere in a text (looksLikeToken's shape, unanchored). */
const TOKEN_INSIDE = /eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/

/**
 * Why a revocation's `reason` is unacceptable, or null: too long, or holding a character that breaks
 * its one line (named by code point and position, so the operator can find it), or a token pasted into
 * it. The admin API answers it with 400; `wardline revoke --reason` checks it before calling the API.
 */
export function reasonProblem(reason: unknown): string | null {
  if (typeof reason !== 'string') return 'reason must be a string'
  if (reason.length > MAX_REASON_CHARS) return `reason is longer than ${MAX_REASON_CHARS} characters`
  const found = REASON_UNSAFE.exec(reason)
  if (found === null) {
    // A note such as "leaked: eyJ…" would keep the token in the table, the list and the admin audit trail.
    return TOKEN_INSIDE.test(reason) ? 'reason contains a token (eyJ….….…): name it by its jti, never paste the token' : null
  }
  const code = found[0].charCodeAt(0)
  const name = `U+${code.toString(16).toUpperCase().padStart(4, '0')}`
  const what =
    code === 0x0a || code === 0x0d || code === 0x85 || code === 0x2028 || code === 0x2029 ? 'a line break' : 'a control character'
  return `reason contains ${what} (${name}) at character ${found.index + 1}: a reason is one line of printable text`
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
