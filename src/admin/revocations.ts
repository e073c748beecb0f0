import { DEFAULT_TENANT } from '../auth/principal'
import {
  RevocationInputError,
  type RevocationList,
  type RevocationRequest,
  type RevocationTarget,
  looksLikeToken,
  targetProblem,
} from '../auth/revocations'
import { type AdminAnswer, type AdminRequest, AdminStoreFailure, onTarget } from './server'

const BODY_KEYS = ['identity', 'tenant', 'jti', 'issued_before', 'until', 'reason']
const QUERY_KEYS = ['identity', 'tenant', 'jti', 'kind']

/**
 * POST /revocations: revokes, until `until` (an ISO 8601 time; absent or null: until removed), one of
 *  - `{identity, tenant?}`: every token of the identity (`*`: every identity of the tenant);
 *  - `{jti}`: the one token whose `jti` claim is this (whoever holds it);
 *  - `{identity, tenant?, issued_before}`: the identity's (or, with `*`, the tenant's) tokens whose
 *    `iat` is before that ISO 8601 time; tokens minted after it work.
 * Tenant `default` unless given, as for a token without a tenant claim (the answer names it; the CLI
 * requires it). `reason` is optional. Answers 201 with the revocation as listed.
 */
export function createRevocation(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ body }) => {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      return refusal(400, 'the body must be a JSON object: {"identity", "tenant"} or {"jti"}, with "issued_before", "until", "reason"')
    }
    const o = body as Record<string, unknown>
    const unknown = Object.keys(o).filter((k) => !BODY_KEYS.includes(k))
    if (unknown.length > 0) return refusal(400, `unknown field ${JSON.stringify(unknown[0])} (allowed: ${BODY_KEYS.join(', ')})`)
    const read = bodyTarget(o)
    if (typeof read === 'string') return refusal(400, read)
    const target = describe(read)
    const until = o.until === undefined || o.until === null ? null : isoTime(o.until)
    if (until === undefined) return { ...refusal(400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'), target }
    if (o.reason !== undefined && typeof o.reason !== 'string') return { ...refusal(400, 'reason must be a string'), target }
    const common = { until, ...(o.reason === undefined ? {} : { reason: o.reason }) }
    let request: RevocationRequest
    if (read.kind === 'issued_before') {
      const issuedBefore = isoTime(o.issued_before)
      if (issuedBefore === undefined) {
        return { ...refusal(400, 'issued_before must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z)'), target }
      }
      request = { ...read, issuedBefore, ...common }
    } else request = { ...read, ...common }
    try {
      const revocation = await list.revoke(request)
      const end = revocation.until === null ? 'until removed' : `until ${revocation.until}`
      const what = revocation.kind === 'issued_before' ? `tokens issued before ${revocation.issued_before} revoked` : 'revoked'
      return { status: 201, body: { revocation }, target, reason: `${what} ${end}${revocation.reason ? `: ${revocation.reason}` : ''}` }
    } catch (err) {
      if (err instanceof RevocationInputError) return { ...refusal(400, err.message), target }
      throw new AdminStoreFailure(err, target)
    }
  }
}

/** Which revocation a POST body names, or why it names none (checked as the list will: a 400 before anything is stored). */
function bodyTarget(o: Record<string, unknown>): RevocationTarget | string {
  if (o.jti !== undefined) {
    const extra = ['identity', 'tenant', 'issued_before'].find((k) => o[k] !== undefined)
    if (extra !== undefined) return `jti names one token: leave out ${extra}`
    const target = { kind: 'jti', jti: o.jti } as RevocationTarget
    return targetProblem(target) ?? target
  }
  if (o.identity === undefined) return 'identity (use "*" for every identity of the tenant) or jti is required'
  if (typeof o.identity !== 'string') return 'identity must be a string'
  if (o.tenant !== undefined && typeof o.tenant !== 'string') return 'tenant must be a string'
  const kind = o.issued_before === undefined ? 'identity' : 'issued_before'
  const target: RevocationTarget = { kind, identity: o.identity, tenant: o.tenant ?? DEFAULT_TENANT }
  return targetProblem(target) ?? target
}

/** GET /revocations: every revocation in force: identity ones, then issued-before ones, then jti ones. */
export function listRevocations(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ query }) => {
    const extra = [...query.keys()]
    if (extra.length > 0) return refusal(400, `unknown query parameter ${JSON.stringify(extra[0])} (GET /revocations takes none)`)
    const revocations = await list.list()
    return { status: 200, body: { revocations }, reason: `${revocations.length} in force` }
  }
}

/**
 * DELETE /revocations?identity=&tenant= (an identity's, or with identity `*` the tenant's),
 * ?identity=&tenant=&kind=issued_before (its issued-before one), or ?jti= : lifts exactly that entry.
 */
export function removeRevocation(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ query }) => {
    for (const name of new Set(query.keys())) {
      if (!QUERY_KEYS.includes(name))
        return refusal(400, `unknown query parameter ${JSON.stringify(name)} (allowed: ${QUERY_KEYS.join(', ')})`)
      if (query.getAll(name).length > 1) return refusal(400, `query parameter ${name} is given more than once`)
    }
    const kind = query.get('kind') ?? (query.has('jti') ? 'jti' : 'identity')
    let target: RevocationTarget
    if (kind === 'jti') {
      const extra = ['identity', 'tenant'].find((k) => query.has(k))
      if (extra !== undefined) return refusal(400, `jti names one token: leave out ${extra}`)
      const jti = query.get('jti')
      if (jti === null) return refusal(400, 'jti is required with kind=jti')
      target = { kind: 'jti', jti }
    } else if (kind === 'identity' || kind === 'issued_before') {
      if (query.has('jti')) return refusal(400, `jti names a token revocation: leave out kind=${kind}`)
      const identity = query.get('identity')
      if (identity === null) return refusal(400, 'identity is required (the revocation to lift; "*" for a tenant-wide one), or jti')
      target = { kind, identity, tenant: query.get('tenant') ?? DEFAULT_TENANT }
    } else return refusal(400, 'kind must be identity, issued_before or jti')
    const problem = targetProblem(target)
    if (problem !== null) return { ...refusal(400, problem), target: describe(target) }
    const removed = await onTarget(describe(target), list.remove(target))
    if (!removed) return { ...refusal(404, `no ${describeForPeople(target)}`), target: describe(target) }
    return {
      status: 200,
      body: { removed: { kind: target.kind ?? 'identity', ...withoutKind(target) } },
      target: describe(target),
      reason: 'revocation lifted',
    }
  }
}

function withoutKind(target: RevocationTarget): Record<string, string> {
  return target.kind === 'jti' ? { jti: target.jti } : { identity: target.identity, tenant: target.tenant }
}

/** The 404 message: which revocation there is none of (the JSON-quoted values, as sent). */
function describeForPeople(target: RevocationTarget): string {
  if (target.kind === 'jti') return `revocation for token jti ${JSON.stringify(target.jti)}`
  const where = `identity ${JSON.stringify(target.identity)} in tenant ${JSON.stringify(target.tenant)}`
  return target.kind === 'issued_before' ? `issued-before revocation for ${where}` : `revocation for ${where}`
}

/** An ISO 8601 time with a zone as a Date, or undefined when `value` is not one. */
function isoTime(value: unknown): Date | undefined {
  if (typeof value !== 'string' || !ISO_TIME.test(value) || Number.isNaN(Date.parse(value)) || !realDay(value)) return undefined
  return new Date(value)
}

/** A date and time with a zone (Z or ±hh:mm): Date.parse alone would read `2026-12-01` or `Dec 1` in some zone of its choosing. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/

/** Date.parse rolls a day past the month's end over (2026-02-31 reads as March 3): such a day is refused, not moved. */
function realDay(text: string): boolean {
  const [y, m, d] = text.slice(0, 10).split('-').map(Number)
  return d >= 1 && d <= new Date(Date.UTC(y, m, 0)).getUTCDate()
}

function refusal(status: number, message: string): AdminAnswer {
  return { status, body: { error: message }, reason: message }
}

/** The audit target: `identity=… tenant=…`, `jti=…`, with ` kind=issued_before` for that kind. */
function describe(target: RevocationTarget): string {
  // A token pasted as a jti is refused (jtiProblem); its refusal's audit target must not keep it either.
  if (target.kind === 'jti') return looksLikeToken(target.jti) ? 'jti=(a token, not shown)' : `jti=${targetValue(target.jti)}`
  const pair = `identity=${shownValue(target.identity)} tenant=${shownValue(target.tenant)}`
  return target.kind === 'issued_before' ? `${pair} kind=issued_before` : pair
}

/** targetValue, except that a whole token (refused as a target, but its refusal is audited too) is never written. */
function shownValue(value: string): string {
  return looksLikeToken(value) ? '(a token, not shown)' : targetValue(value)
}

/** A value of the audit target as it is, or JSON-quoted when it holds a space, `=`, `"` or `\\` (so `identity=x tenant=acme` names one caller only). */
export function targetValue(value: string): string {
  return /^[^\s="\\]+$/.test(value) ? value : JSON.stringify(value)
}
