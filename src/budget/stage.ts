import type { BucketLimit, BudgetConfig } from '../config/types'
import { withDeadline } from '../deadline'
import { WardlineError, describeError } from '../errors'
import { type Logger, RateLimitedLog } from '../log'
import type { Metrics } from '../metrics'
import type { Exchange } from '../pipeline/exchange'
import { CONTINUE, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { FailOpenWindow } from './fail-open-window'
import { identityKey, tenantKey, toolKey } from './keys'
import type { AdmitResult, BucketCharge, BucketKind, BucketState, BudgetStore } from './store'

export interface BudgetStageOptions {
  /** Wall clock (ms) for the fail-open count; tests inject one. */
  readonly now?: () => number
  /**
   * Shared by the stages a reload replaces (compose.ts makes them once), so a reload in the middle of
   * an outage neither zeroes /readyz's fail-open count nor repeats the rate-limited warning.
   */
  readonly failOpens?: FailOpenWindow
  readonly warnings?: RateLimitedLog
}

/** The budget stage, plus what /readyz reports about it. */
export interface BudgetStage extends Stage {
  /** Calls admitted because the store failed (on_store_error: open) in the last 60 seconds. */
  failOpensLastMinute(): number
}

/** A bucket listed in the config, with everything the hot path needs computed at load time. */
interface ListedBucket {
  readonly key: string
  readonly kind: BucketKind
  readonly name: string
  readonly limit: number
  readonly windowSeconds: number
  /** Its `RateLimit-Policy` item. */
  readonly policyItem: string
}

/**
 * Budgets `tools/call` (DESIGN.md, "Budget semantics"): every call, and every `tools/call` element
 * of a batch, is charged to the tool bucket (tools listed under budget.tools), the tenant bucket
 * (tenants listed under budget.tenants) and the caller's identity bucket, checked in that order and
 * charged all together or not at all. Runs after authentication and parsing, before policy.
 */
export function budgetStage(
  store: BudgetStore,
  config: BudgetConfig,
  metrics: Metrics,
  log: Logger,
  options: BudgetStageOptions = {},
): BudgetStage {
  const tools = listed('tool', config.tools, toolKey)
  const tenants = listed('tenant', config.tenants, tenantKey)
  const identityPolicyItem = policyItem('identity', config)
  const timeoutMs = config.checkTimeoutSeconds * 1000
  // The overall bound on one check, whatever the store does inside: a store that hangs fails open (or
  // closed) on time instead of holding the call until the client gives up.
  const timeoutMessage = `budget check took longer than ${config.checkTimeoutSeconds}s (budget.check_timeout_seconds)`
  const failOpens = options.failOpens ?? new FailOpenWindow(options.now ?? Date.now)
  const warnings = options.warnings ?? new RateLimitedLog(log)

  const failed = (ex: Exchange, err: unknown): Verdict => {
    metrics.budgetStoreErrors.inc()
    if (config.onStoreError === 'closed') {
      throw new WardlineError('WL_BUDGET_STORE_FAILED', 'budget check failed and budget.on_store_error is closed', { cause: err })
    }
    const cause = describeError(err)
    ex.reason = `budget check failed open: ${cause}`
    metrics.budgetFailOpen.inc()
    failOpens.add()
    warnings.warn('budget-fail-open', 'budget check failed: admitting calls unchecked (budget.on_store_error: open)', { error: cause })
    return CONTINUE
  }

  return {
    name: 'budget',
    failOpensLastMinute: () => failOpens.count(),
    async run(ex: Exchange): Promise<Verdict> {
      const charges = chargesFor(ex, tools, tenants, config, identityPolicyItem)
      if (charges === null) return CONTINUE
      let result: AdmitResult
      try {
        result = await (store.neverWaits ? store.admit(charges) : withDeadline(store.admit(charges, timeoutMs), timeoutMs, timeoutMessage))
      } catch (err) {
        return failed(ex, err)
      }
      if (!result.admitted) return throttled(result, charges)
      const headers = rateLimitFields(result.buckets, charges)
      if (ex.responseHeaders === null) ex.responseHeaders = headers
      else Object.assign(ex.responseHeaders, headers)
      return CONTINUE
    },
  }
}

/** A charge with its policy item, so the response fields need no second lookup. */
interface Charge extends BucketCharge {
  readonly policyItem: string
}

/** The buckets this request must clear, in check order (tool → tenant → identity), or null when it has no tools/call. */
function chargesFor(
  ex: Exchange,
  tools: ReadonlyMap<string, ListedBucket>,
  tenants: ReadonlyMap<string, ListedBucket>,
  identityLimit: BucketLimit,
  identityPolicyItem: string,
): Charge[] | null {
  const charges: Charge[] = []
  let calls = 0
  for (const call of ex.calls) {
    if (call.method !== 'tools/call') continue
    calls++
    const tool = tools.get(call.target)
    if (tool === undefined) continue
    // A batch may call one listed tool several times: one charge per bucket, its cost summed.
    let i = 0
    while (i < charges.length && charges[i].key !== tool.key) i++
    if (i < charges.length) charges[i] = { ...charges[i], cost: charges[i].cost + 1 }
    else charges.push(charge(tool, 1))
  }
  if (calls === 0) return null
  const identity = ex.principal?.identity ?? ''
  const tenantName = ex.principal?.tenant ?? ''
  const tenant = tenants.get(tenantName)
  if (tenant !== undefined) charges.push(charge(tenant, calls))
  charges.push({
    key: identityKey(tenantName, identity),
    kind: 'identity',
    name: identity,
    limit: identityLimit.requestsPerWindow,
    windowSeconds: identityLimit.windowSeconds,
    cost: calls,
    policyItem: identityPolicyItem,
  })
  return charges
}

function charge(b: ListedBucket, cost: number): Charge {
  return { key: b.key, kind: b.kind, name: b.name, limit: b.limit, windowSeconds: b.windowSeconds, cost, policyItem: b.policyItem }
}

function throttled(result: AdmitResult, charges: readonly Charge[]): Refusal {
  const by = result.buckets[result.refusedBy]
  const cost = charges[result.refusedBy].cost
  // A batch that can never fit gets a whole window, not the rest of this one: retrying sooner cannot help.
  const retryAfter = wholeSeconds(cost > by.limit ? by.windowSeconds : by.resetSeconds)
  return {
    status: 429,
    decision: 'throttled',
    // A batch needing more than a whole window allows can never be admitted, however long it waits:
    // the Retry-After every 429 carries cannot help it, so the audit says the batch must be split.
    reason:
      cost > by.limit
        ? `rate limit exceeded: batch needs ${cost} requests from the ${by.kind} bucket, which allows ${by.limit} per ${by.windowSeconds}s window: it can never be admitted whole`
        : `rate limit exceeded: ${by.kind} bucket, ${by.limit} requests per ${by.windowSeconds}s window`,
    message: 'Rate limit exceeded',
    // Only the caller's own wait and which kind of bucket refused: never another caller's counts.
    data: { retry_after_seconds: retryAfter, bucket: by.kind },
    headers: {
      'retry-after': String(retryAfter),
      // A 429 is about this caller at this moment: no cache may replay it to anyone else.
      'cache-control': 'no-store',
      ...rateLimitFields(result.buckets, charges, result.refusedBy),
    },
  }
}

/**
 * `RateLimit-Policy` and `RateLimit` as in draft-ietf-httpapi-ratelimit-headers: one item per bucket
 * that applies, named by its kind; q = limit, w = window, r = remaining, t = seconds to reset. Item
 * names must be unique, so a batch calling several listed tools gets the tightest tool bucket only.
 */
function rateLimitFields(buckets: readonly BucketState[], charges: readonly Charge[], refusedBy = -1): Record<string, string> {
  // On a 429 the tool item is the bucket that refused, so RateLimit and Retry-After tell one story.
  const tool = refusedBy >= 0 && buckets[refusedBy].kind === 'tool' ? refusedBy : tightestTool(buckets)
  let policy = ''
  let state = ''
  for (let i = 0; i < buckets.length; i++) {
    const b = buckets[i]
    if (b.kind === 'tool' && i !== tool) continue
    const sep = policy === '' ? '' : ', '
    policy += sep + charges[i].policyItem
    state += `${sep}"${b.kind}";r=${b.remaining};t=${wholeSeconds(b.resetSeconds)}`
  }
  return { 'ratelimit-policy': policy, ratelimit: state }
}

/** Index of the tool bucket with the fewest requests left (the sooner reset on a tie), or -1. */
function tightestTool(buckets: readonly BucketState[]): number {
  let best = -1
  for (let i = 0; i < buckets.length; i++) {
    const b = buckets[i]
    if (b.kind !== 'tool') continue
    if (
      best < 0 ||
      b.remaining < buckets[best].remaining ||
      (b.remaining === buckets[best].remaining && b.resetSeconds < buckets[best].resetSeconds)
    )
      best = i
  }
  return best
}

/** Whole seconds, rounded up and at least 1: a client that waits this long finds the window reset. */
function wholeSeconds(seconds: number): number {
  return Math.max(1, Math.ceil(seconds))
}

function policyItem(kind: BucketKind, limit: BucketLimit): string {
  // The draft's w is an integer: a fractional window (tests, demos) is announced rounded up.
  return `"${kind}";q=${limit.requestsPerWindow};w=${wholeSeconds(limit.windowSeconds)}`
}

function listed(kind: BucketKind, limits: Readonly<Record<string, BucketLimit>>, key: (name: string) => string): Map<string, ListedBucket> {
  const out = new Map<string, ListedBucket>()
  for (const [name, limit] of Object.entries(limits)) {
    out.set(name, {
      key: key(name),
      kind,
      name,
      limit: limit.requestsPerWindow,
      windowSeconds: limit.windowSeconds,
      policyItem: policyItem(kind, limit),
    })
  }
  return out
}
