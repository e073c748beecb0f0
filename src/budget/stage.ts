import type { BudgetConfig } from '../config/types'
import { withDeadline } from '../deadline'
import { WardlineError, describeError } from '../errors'
import { type Logger, RateLimitedLog } from '../log'
import type { BudgetMetrics } from './metrics'
import type { Exchange, RpcCall } from '../pipeline/exchange'
import { NOTE, addNote, joinReasons } from '../pipeline/reason'
import { CONTINUE, type Outcome, type Refusal, type Stage, type Verdict } from '../pipeline/stage'
import { stateKey } from '../pipeline/state'
import { throttledAgentText } from './agent-text'
import { type BudgetPlan, type WindowSpec, budgetPlan, serverPlan } from './buckets'
import { callFingerprint } from './call-fingerprint'
import { FailOpenWindow } from './fail-open-window'
import { IdentityKeyCache, windowKey } from './keys'
import { type LocalAdmission, LocalLimiter } from './local-limiter'
import type { AdmitResult, BucketCharge, BucketState, BudgetStore } from './store'

export interface BudgetStageOptions {
  /** Wall clock (ms) for the fail-open count; tests inject one. */
  readonly now?: () => number
  /**
   * Shared by the stages a reload replaces (budget/open.ts makes them once), so a reload in the middle of
   * an outage neither zeroes /readyz's fail-open count nor repeats the rate-limited warning.
   */
  readonly failOpens?: FailOpenWindow
  readonly warnings?: RateLimitedLog
  /** Checks judged locally (on_store_error: local) in the last minute, for /readyz; shared like failOpens. */
  readonly degraded?: FailOpenWindow
  /**
   * The limiter that judges checks while the store fails (on_store_error: local), shared by the stages a
   * reload replaces so its counts and remembered shared counts survive a reload.
   */
  readonly localLimiter?: LocalLimiter
}

/** A charge with the window it counts against, so headers and reasons need no second lookup. */
interface Charge extends BucketCharge {
  readonly spec: WindowSpec
}

/** What an admitted call was charged, kept on the Exchange until the upstream's outcome is known. */
class Receipt {
  constructor(
    readonly charges: readonly Charge[],
    readonly result: AdmitResult,
    /** Set when the local limiter admitted it (on_store_error: local): a refund goes there, not to the store. */
    readonly local: LocalAdmission | null = null,
  ) {}
}

/** The receipt of an admitted call, kept for a refund if the upstream never serves it; null when none. */
const RECEIPT = stateKey<Receipt | null>('budget.receipt', null)

/**
 * Budgets `tools/call` (docs/budget.md). Every call, and every `tools/call` element of
 * a batch, needs its cost (budget.tools.<tool>.cost, default 1) from every window of every tier that
 * applies, checked in the order repeat → tool → server → tenant → identity and charged all together or
 * not at all. With `servers:` the request's server (`ex.server`) picks its tools' buckets
 * (`<server>/<tool>`) and its server bucket; tenant and identity buckets span every server.
 *  - a call policy denies (`ex.denial`, set by the policy stage just before) is checked against every
 *    tier but charged to the caller's own identity bucket only, so a caller probing forbidden tools is
 *    throttled without using up what a tool or tenant shares with others;
 *  - an admitted call the upstream provably never ran (never written to it: unreachable, or still
 *    waiting for a connection; or refused with 429 or 503) is refunded in the answer phase, in the
 *    windows it was charged to. A call written to it keeps its charge whatever follows (a timeout).
 * A check the store fails (an error, or no verdict within check_timeout_seconds) is admitted, refused
 * with 503, or judged by this replica alone at limit ÷ live replicas, as budget.on_store_error says.
 * Runs after authentication, parsing and the policy's judgement, before the policy's answer.
 */
export function budgetStage(
  store: BudgetStore,
  config: BudgetConfig,
  metrics: BudgetMetrics,
  log: Logger,
  options: BudgetStageOptions = {},
): Stage {
  const plan = budgetPlan(config)
  const identityKeys = new IdentityKeyCache(plan.identity.map((w) => w.windowSeconds))
  const timeoutMs = config.checkTimeoutSeconds * 1000
  // The overall bound on one check, whatever the store does inside: a store that hangs fails open (or
  // closed) on time instead of holding the call until the client gives up.
  const timeoutMessage = `budget check took longer than ${config.checkTimeoutSeconds}s (budget.check_timeout_seconds)`
  const failOpens = options.failOpens ?? new FailOpenWindow(options.now ?? Date.now)
  const warnings = options.warnings ?? new RateLimitedLog(log)
  const degradedChecks = options.degraded ?? new FailOpenWindow(options.now ?? Date.now)
  const local = config.onStoreError === 'local'
  const limiter = options.localLimiter ?? new LocalLimiter()

  const failed = (ex: Exchange, err: unknown, charges: readonly Charge[]): Verdict => {
    metrics.budgetStoreErrors.inc()
    if (config.onStoreError === 'closed') {
      throw new WardlineError('WL_BUDGET_STORE_FAILED', 'budget check failed and budget.on_store_error is closed', { cause: err })
    }
    const cause = describeError(err)
    if (local) return degraded(ex, charges, cause)
    addNote(ex, NOTE.budgetFailOpen, `budget check failed open: ${cause}`)
    metrics.budgetFailOpen.inc()
    failOpens.add()
    warnings.warn('budget-fail-open', 'budget check failed: admitting calls unchecked (budget.on_store_error: open)', { error: cause })
    return CONTINUE
  }

  /** The store failed: this replica judges the check alone, at its share of every limit. */
  const degraded = (ex: Exchange, charges: readonly Charge[], cause: string): Verdict => {
    const replicas = store.liveReplicas?.() ?? 1
    metrics.budgetDegraded.inc()
    degradedChecks.add()
    warnings.warn('budget-degraded', 'budget check failed: enforcing each limit ÷ live replicas locally (budget.on_store_error: local)', {
      error: cause,
      live_replicas: replicas,
    })
    const admission = limiter.admit(charges, replicas)
    const why = `budget check degraded to local limit: ${cause}`
    if (!admission.result.admitted) {
      const refusal = throttled(admission.result, charges, plan, ex)
      return { ...refusal, reason: joinReasons(refusal.reason, why) }
    }
    addNote(ex, NOTE.budgetDegraded, why)
    return decided(ex, charges, admission.result, plan, admission)
  }

  const refund = (receipt: Receipt): void => {
    if (receipt.local !== null) {
      limiter.refund(receipt.local)
      metrics.budgetRefunds.labels('unserved').inc()
      return
    }
    store.refund(receipt.charges, receipt.result, timeoutMs).then(
      () => metrics.budgetRefunds.labels('unserved').inc(),
      (err: unknown) => {
        metrics.budgetRefundFailures.inc()
        warnings.warn('budget-refund', 'could not refund a call the MCP server never served', { error: describeError(err) })
      },
    )
  }

  const checkAndDecide = async (ex: Exchange, charges: readonly Charge[]): Promise<Verdict> => {
    // The units admitted locally during an outage go back to the shared counts in the statement of the
    // checks after it, before they are judged (BudgetStore.admit); also after a reload from local to
    // open or closed mid-outage.
    const handOver = local || limiter.holdsCounts ? limiter : undefined
    let result: AdmitResult
    try {
      result = await withDeadline(store.admit(charges, timeoutMs, handOver), timeoutMs, timeoutMessage)
    } catch (err) {
      return failed(ex, err, charges)
    }
    // Remembered for a later outage: its local share starts from these counts.
    if (handOver !== undefined) limiter.remember(charges, result)
    return decided(ex, charges, result, plan)
  }

  return {
    name: 'budget',
    answers: { methods: ['tools/call'], reads: 'outcome' },
    run(ex: Exchange): Verdict | Promise<Verdict> {
      const charges = chargesFor(ex, plan, identityKeys)
      if (charges === null) return CONTINUE
      if (store.admitNow === undefined) return checkAndDecide(ex, charges)
      let result: AdmitResult
      try {
        result = store.admitNow(charges)
      } catch (err) {
        return failed(ex, err, charges)
      }
      // An in-process store has nothing to remember for an outage: its counts are the local ones.
      return decided(ex, charges, result, plan)
    },
    onOutcome(ex: Exchange, outcome: Outcome): void {
      const receipt = ex.get(RECEIPT)
      if (receipt === null) return
      const why = unserved(outcome)
      if (why === null) return
      ex.set(RECEIPT, null)
      addNote(ex, NOTE.budgetRefunded, `budget refunded: ${why}`)
      // The MCP server's refusal goes back to the client: its RateLimit fields count the refund.
      if (outcome.status !== 0 && ex.responseHeaders !== null) {
        Object.assign(ex.responseHeaders, rateLimitFields(receipt.result.buckets, receipt.charges, -1, true))
      }
      refund(receipt)
    },
  }
}

/** The verdict on a checked call; an admitted one gets its receipt and RateLimit fields. */
function decided(
  ex: Exchange,
  charges: readonly Charge[],
  result: AdmitResult,
  plan: BudgetPlan,
  local: LocalAdmission | null = null,
): Verdict {
  if (!result.admitted) return throttled(result, charges, plan, ex)
  // A denied call is answered next and never forwarded: nothing of it is ever refunded.
  if (ex.denial !== null) return CONTINUE
  ex.set(RECEIPT, new Receipt(charges, result, local))
  const headers = rateLimitFields(result.buckets, charges)
  if (ex.responseHeaders === null) ex.responseHeaders = headers
  else Object.assign(ex.responseHeaders, headers)
  return CONTINUE
}

/**
 * Why an admitted call counts as never served, or null when the MCP server may have run it. Only what
 * provably never ran is refunded: a call never written to the upstream (the client left first, no
 * connection could be made, no connection came free in time), or one the server refused with 429 or
 * 503. Once the call was written, a timeout, a reset or a client that left keeps its charge: the
 * server may be running it, and refunding those would let a tool that outlasts upstream_timeout_seconds
 * run without limit (a slow tool ran 11 times under a budget of 3).
 */
function unserved(outcome: Outcome): string | null {
  if (outcome.status === 429 || outcome.status === 503) return `the MCP server answered ${outcome.status}`
  if (outcome.status !== 0 || outcome.sent) return null
  return outcome.failure === null ? 'the call never left the gateway' : `the call never reached the MCP server (${outcome.failure.code})`
}

/**
 * The windows this request must clear, in check order (repeat → tool → server → tenant → identity), or
 * null when it has no tools/call. A batch sums its calls' costs per bucket (a request goes to one server).
 */
function chargesFor(ex: Exchange, plan: BudgetPlan, identityKeys: IdentityKeyCache): Charge[] | null {
  const shared = ex.denial === null // a denied call is checked everywhere but charged to its caller only
  const identity = ex.principal?.identity ?? ''
  const tenantName = ex.principal?.tenant ?? ''
  const scope = serverPlan(plan, ex.server)
  const charges: Charge[] = []
  let repeats: Charge[] | null = null
  let units = 0
  const calls = ex.calls
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]
    if (call.method !== 'tools/call') continue
    const tool = scope.tools.get(call.target)
    const cost = tool === undefined ? 1 : tool.cost
    units += cost
    if (plan.repeat !== null)
      add((repeats ??= []), repeatKey(ex, call, tenantName, identity, plan.repeat), plan.repeat, call.target, 1, shared)
    if (tool !== undefined) for (const w of tool.windows) add(charges, w.key, w, w.name, cost, shared)
  }
  if (units === 0) return null
  // Shared by every caller of the server: checked for a denied call, charged only for an admitted one.
  for (const w of scope.windows) add(charges, w.key, w, w.name, units, shared)
  const tenant = plan.tenants.get(tenantName)
  if (tenant !== undefined) for (const w of tenant) add(charges, w.key, w, w.name, units, shared)
  const keys = identityKeys.keysOf(tenantName, identity)
  for (let i = 0; i < plan.identity.length; i++) add(charges, keys[i], plan.identity[i], identity, units, true)
  return repeats === null ? charges : repeats.concat(charges)
}

/** Adds `cost` to the charge for `key`, or a new charge: one charge per bucket, whatever a batch holds. */
function add(charges: Charge[], key: string, spec: WindowSpec, name: string, cost: number, charged: boolean): void {
  for (let i = 0; i < charges.length; i++) {
    if (charges[i].key === key) {
      charges[i] = { ...charges[i], cost: charges[i].cost + cost }
      return
    }
  }
  charges.push({ key, kind: spec.kind, name, limit: spec.limit, windowSeconds: spec.windowSeconds, cost, charged, spec })
}

/**
 * One identity, one call (server, tool and canonical arguments, hashed: call-fingerprint.ts), one window
 * length. Identity and tenant are at most MAX_PRINCIPAL_BYTES each, so the key stays small whatever the call holds.
 */
function repeatKey(ex: Exchange, call: RpcCall, tenant: string, identity: string, spec: WindowSpec): string {
  const fingerprint = callFingerprint(call.target, ex.body as Buffer, call.argumentsStart, call.argumentsEnd, ex.server)
  return windowKey(JSON.stringify(['repeat', tenant, identity, fingerprint]), spec.windowSeconds)
}

function throttled(result: AdmitResult, charges: readonly Charge[], plan: BudgetPlan, ex: Exchange): Refusal {
  const batch = ex.batch
  const charge = charges[result.refusedBy]
  const spec = charge.spec
  // More than a whole window allows can never be admitted, however long it waits: the Retry-After every
  // 429 carries cannot help it (it gets a whole window, not the rest of this one), so the audit says so.
  const never = charge.cost > charge.limit
  const retryAfter = wholeSeconds(never ? charge.windowSeconds : result.buckets[result.refusedBy].resetSeconds)
  const unit = plan.weighted ? 'units' : 'requests'
  let reason: string
  if (spec.kind === 'repeat') {
    reason = `repeated call: ${JSON.stringify(charge.name)} with the same arguments more than ${charge.limit} times in ${charge.windowSeconds}s (budget.repeat_limit)`
  } else {
    // A server bucket is named with its server: the audit entry's server field says where the call
    // went, the reason which shared quota it ran into.
    const bucket = spec.kind === 'server' ? `${spec.label} bucket of ${JSON.stringify(spec.name)}` : `${spec.label} bucket`
    reason = never
      ? `rate limit exceeded: ${batch ? 'batch' : 'call'} needs ${charge.cost} ${unit} from the ${bucket}, which allows ${charge.limit} per ${charge.windowSeconds}s window: it can never be admitted whole`
      : `rate limit exceeded: ${bucket}, ${charge.limit} ${unit} per ${charge.windowSeconds}s window`
  }
  // The model's reading of it (tool_refusals: result), for a single call only: a batch is always
  // answered as an HTTP error. A call that can never fit gets no retry time there.
  const agentText = batch
    ? undefined
    : throttledAgentText({
        kind: spec.kind,
        tool: ex.calls[0].target,
        server: ex.server,
        limit: charge.limit,
        windowSeconds: charge.windowSeconds,
        cost: charge.cost,
        weighted: plan.weighted,
        retryAfterSeconds: retryAfter,
        never,
      })
  return {
    status: 429,
    decision: 'throttled',
    code: spec.kind === 'repeat' ? 'budget.repeat' : 'budget.exceeded',
    reason,
    message: 'Rate limit exceeded',
    // Only the caller's own wait and which bucket refused: never another caller's counts.
    data: { retry_after_seconds: retryAfter, bucket: spec.label },
    agentText,
    agentMeta: never && !batch ? { bucket: spec.label } : undefined,
    headers: {
      'retry-after': String(retryAfter),
      // A 429 is about this caller at this moment: no cache may replay it to anyone else.
      'cache-control': 'no-store',
      ...rateLimitFields(result.buckets, charges, result.refusedBy),
    },
  }
}

/**
 * `RateLimit-Policy` and `RateLimit` as in draft-ietf-httpapi-ratelimit-headers: one item per window
 * that applies, named by its label (window-spec); q = limit, w = window, r = remaining, t = seconds to
 * reset, all in units. Item names must be unique, so a batch calling several listed tools gets, per
 * label, the tool window that refused or else the tightest. The loop breaker's window appears only on
 * the 429 it caused. `refunded`: the counts as they are after the call's refund.
 */
function rateLimitFields(
  buckets: readonly BucketState[],
  charges: readonly Charge[],
  refusedBy = -1,
  refunded = false,
): Record<string, string> {
  let policy = ''
  let state = ''
  for (let i = 0; i < buckets.length; i++) {
    const spec = charges[i].spec
    if (spec.kind === 'repeat' && i !== refusedBy) continue
    if (spec.kind === 'tool' && shownToolWindow(buckets, charges, spec.label, refusedBy, refunded) !== i) continue
    const sep = policy === '' ? '' : ', '
    policy += sep + spec.policyItem
    state += `${sep}${spec.rateLimitItemStart}${remainingOf(buckets, charges, i, refunded)};t=${wholeSeconds(buckets[i].resetSeconds)}`
  }
  return { 'ratelimit-policy': policy, ratelimit: state }
}

/** Units left in window i, or after the call's refund when `refunded`. */
function remainingOf(buckets: readonly BucketState[], charges: readonly Charge[], i: number, refunded: boolean): number {
  const c = charges[i]
  return refunded && c.charged ? Math.min(c.limit, buckets[i].remaining + c.cost) : buckets[i].remaining
}

/**
 * Of the tool windows with this label, the one a response shows: the one that refused, else the one
 * with the fewest units left (the sooner reset on a tie). A check has a handful of charges.
 */
function shownToolWindow(
  buckets: readonly BucketState[],
  charges: readonly Charge[],
  label: string,
  refusedBy: number,
  refunded: boolean,
): number {
  if (refusedBy >= 0 && charges[refusedBy].spec.kind === 'tool' && charges[refusedBy].spec.label === label) return refusedBy
  let best = -1
  let bestLeft = 0
  for (let i = 0; i < buckets.length; i++) {
    const spec = charges[i].spec
    if (spec.kind !== 'tool' || spec.label !== label) continue
    const left = remainingOf(buckets, charges, i, refunded)
    if (best < 0 || left < bestLeft || (left === bestLeft && buckets[i].resetSeconds < buckets[best].resetSeconds)) {
      best = i
      bestLeft = left
    }
  }
  return best
}

/** Whole seconds, rounded up and at least 1: a client that waits this long finds the window reset. */
function wholeSeconds(seconds: number): number {
  return Math.max(1, Math.ceil(seconds))
}
