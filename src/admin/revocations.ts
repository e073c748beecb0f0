import { DEFAULT_TENANT, checkPrincipal } from '../auth/principal'
import { ALL_IDENTITIES, RevocationInputError, type RevocationList } from '../auth/revocations'
import { type AdminAnswer, type AdminRequest, AdminStoreFailure, onTarget } from './server'

const BODY_KEYS = ['identity', 'tenant', 'until', 'reason']

/**
 * POST /revocations `{identity, tenant?, until?, reason?}`: revokes an identity (`*`: every identity of
 * the tenant) until `until` (an ISO 8601 time; absent or null: until removed). Tenant `default` unless
 * given, as for a token without a tenant claim. Answers 201 with the revocation as listed.
 */
export function createRevocation(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ body }) => {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      return refusal(400, 'the body must be a JSON object {"identity": …, "tenant": …, "until": …, "reason": …}')
    }
    const o = body as Record<string, unknown>
    const unknown = Object.keys(o).filter((k) => !BODY_KEYS.includes(k))
    if (unknown.length > 0) return refusal(400, `unknown field ${JSON.stringify(unknown[0])} (allowed: ${BODY_KEYS.join(', ')})`)
    if (o.identity === undefined) return refusal(400, 'identity is required (use "*" for every identity of the tenant)')
    if (typeof o.identity !== 'string') return refusal(400, 'identity must be a string')
    if (o.tenant !== undefined && typeof o.tenant !== 'string') return refusal(400, 'tenant must be a string')
    const identity = o.identity
    const tenant = o.tenant ?? DEFAULT_TENANT
    const target = describe(identity, tenant)
    let until: Date | null = null
    if (o.until !== undefined && o.until !== null) {
      if (typeof o.until !== 'string' || !ISO_TIME.test(o.until) || Number.isNaN(Date.parse(o.until)) || !realDay(o.until)) {
        return { ...refusal(400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'), target }
      }
      until = new Date(o.until)
    }
    if (o.reason !== undefined && typeof o.reason !== 'string') return { ...refusal(400, 'reason must be a string'), target }
    try {
      const revocation = await list.revoke({ identity, tenant, until, ...(o.reason === undefined ? {} : { reason: o.reason }) })
      const end = revocation.until === null ? 'until removed' : `until ${revocation.until}`
      return { status: 201, body: { revocation }, target, reason: `revoked ${end}${revocation.reason ? `: ${revocation.reason}` : ''}` }
    } catch (err) {
      if (err instanceof RevocationInputError) return { ...refusal(400, err.message), target }
      throw new AdminStoreFailure(err, target)
    }
  }
}

/** GET /revocations: every revocation in force, sorted by tenant then identity. */
export function listRevocations(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ query }) => {
    const extra = [...query.keys()]
    if (extra.length > 0) return refusal(400, `unknown query parameter ${JSON.stringify(extra[0])} (GET /revocations takes none)`)
    const revocations = await list.list()
    return { status: 200, body: { revocations }, reason: `${revocations.length} in force` }
  }
}

/** DELETE /revocations?identity=&tenant=: lifts one revocation (exactly that entry: alice's, or the tenant's `*`). */
export function removeRevocation(list: RevocationList): (req: AdminRequest) => Promise<AdminAnswer> {
  return async ({ query }) => {
    for (const name of new Set(query.keys())) {
      if (name !== 'identity' && name !== 'tenant')
        return refusal(400, `unknown query parameter ${JSON.stringify(name)} (allowed: identity, tenant)`)
      if (query.getAll(name).length > 1) return refusal(400, `query parameter ${name} is given more than once`)
    }
    const identity = query.get('identity')
    if (identity === null) return refusal(400, 'identity is required (the revocation to lift; "*" for a tenant-wide one)')
    const tenant = query.get('tenant') ?? DEFAULT_TENANT
    const target = describe(identity, tenant)
    const problem = (identity === ALL_IDENTITIES ? null : checkPrincipal('identity', identity)) ?? checkPrincipal('tenant', tenant)
    if (problem !== null) return { ...refusal(400, problem), target }
    const removed = await onTarget(target, list.remove(identity, tenant))
    if (!removed)
      return { ...refusal(404, `no revocation for identity ${JSON.stringify(identity)} in tenant ${JSON.stringify(tenant)}`), target }
    return { status: 200, body: { removed: { identity, tenant } }, target, reason: 'revocation lifted' }
  }
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

function describe(identity: string, tenant: string): string {
  return `identity=${targetValue(identity)} tenant=${targetValue(tenant)}`
}

/** A value of the audit target as it is, or JSON-quoted when it holds a space, `=`, `"` or `\\` (so `identity=x tenant=acme` names one caller only). */
export function targetValue(value: string): string {
  return /^[^\s="\\]+$/.test(value) ? value : JSON.stringify(value)
}
