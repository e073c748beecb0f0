/**
 * Budget enforcement's cost (the target: under 5% of throughput): tools/call through a gateway
 * with budgets off, with budgets on and every call admitted (two windows, a minute and a day, on each
 * of the tool, tenant and identity tiers, and the tool costing 3 units: six buckets charged), and
 * with every call throttled (the 429 the gateway answers itself, never forwarded). Plus the check and
 * the stage alone, in process, without HTTP: for that config, for the single-window one (three
 * buckets) and with the loop breaker on top (budget.repeat_limit, which hashes the arguments).
 *
 * The single-window config and the loop breaker are compared in process only: a fourth HTTP scenario
 * (five rounds of ~1.3 s each) would take the section past its 28 s, and the few microseconds they
 * differ by are lost in the HTTP figures' noise on a shared machine anyway.
 */
import { identityKey, tenantKey, toolKey, windowKey } from '../src/budget/keys'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { MemoryBudgetStore } from '../src/budget/memory-store'
import { budgetStage } from '../src/budget/stage'
import type { BucketCharge, BucketKind } from '../src/budget/store'
import { parseConfig } from '../src/config/load'
import { parseMessages } from '../src/jsonrpc/parse'
import { silentLogger } from '../src/log'
import { BudgetMetrics } from '../src/budget/metrics'
import { Exchange } from '../src/pipeline/exchange'
import { TOOL_CALL_BODY, startBenchGateway, startRawUpstream, toolCallLoad } from './fixtures'
import { type BenchSection, interleave, summarize } from './load'

/** The largest requests_per_window the config accepts (and fits the Postgres store's integer columns): every call is admitted. */
export const HUGE = 1_000_000_000

/** One window per tier (identity "bench", tenant "acme", tool "echo"): three buckets, cost 1. */
const ONE_WINDOW = (limit: number) => ({
  requests_per_window: limit,
  window_seconds: 60,
  tenants: { acme: { requests_per_window: limit, window_seconds: 60 } },
  tools: { echo: { requests_per_window: limit, window_seconds: 60 } },
})

/** A minute and a day on every tier, echo costing 3 units: six buckets charged per call (postgres.ts runs it too). */
export const TWO_WINDOWS = (limit: number) => {
  const limits = () => [
    { requests_per_window: limit, window_seconds: 60 },
    { requests_per_window: limit, window_seconds: 86_400 },
  ]
  return { limits: limits(), tenants: { acme: { limits: limits() } }, tools: { echo: { limits: limits(), cost: 3 } } }
}

/** TWO_WINDOWS plus the loop breaker: every bench call repeats the same arguments, so the limit is its largest. */
const WITH_REPEAT = { ...TWO_WINDOWS(HUGE), repeat_limit: { calls: 1_000_000, window_seconds: 60 } }

/** Measured time of each in-process figure: five of them must fit in the section's 28 s with the HTTP rounds. */
const IN_PROCESS_MS = 150

const budget: BenchSection = {
  name: 'budget',
  // ~23 s on a quiet machine (15 rounds of ~1.3 s, ~1 s in process, the startups): the margin is for a busy one.
  budgetSeconds: 28,
  async run(ctx) {
    const upstream = await startRawUpstream()
    // Started together: each takes ~0.7 s to load in its worker, which adds up to seconds of the budget.
    const [off, allow, throttle] = await Promise.all([
      startBenchGateway(upstream.url, { features: { budget_enforcement: false } }),
      startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: TWO_WINDOWS(HUGE) }),
      // 3: the first call takes the tool's minute window whole, every later one is refused by it.
      startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: TWO_WINDOWS(3) }),
    ])
    try {
      const load = toolCallLoad(ctx)
      ctx.progress(`budget: ${ctx.rounds} rounds of ${ctx.roundMs} ms each for off / on (allowed, 6 buckets) / on (throttled)`)
      const rounds = await interleave(ctx.rounds, { off: load(off.url), allow: load(allow.url), throttle: load(throttle.url) })
      const o = summarize(rounds.off)
      const a = summarize(rounds.allow)
      const t = summarize(rounds.throttle)
      const check6 = checkMicroseconds(echoCharges([60, 86_400], 3))
      const check3 = checkMicroseconds(echoCharges([60], 1))
      const stage6 = await stageMicroseconds(TWO_WINDOWS(HUGE))
      const stage3 = await stageMicroseconds(ONE_WINDOW(HUGE))
      const stageRepeat = await stageMicroseconds(WITH_REPEAT)
      return [
        { label: 'tools/call, budget off', result: o },
        {
          label: 'tools/call, budget on, admitted (6 buckets)',
          result: a,
          note: `×${(a.reqPerSec / o.reqPerSec).toFixed(3)} of budget off (target ≥ ×0.95)`,
        },
        { label: 'tools/call, budget on, throttled (429)', result: t, note: `×${(t.reqPerSec / o.reqPerSec).toFixed(3)} of budget off` },
        { label: 'memory store check alone (6 buckets)', note: `${check6.toFixed(2)} µs per admit, in process` },
        { label: 'memory store check alone (3 buckets)', note: `${check3.toFixed(2)} µs per admit, in process` },
        { label: 'budget stage alone (6 buckets, headers)', note: `${stage6.toFixed(2)} µs per tools/call, in process` },
        { label: 'budget stage alone (3 buckets, headers)', note: `${stage3.toFixed(2)} µs per tools/call, in process` },
        { label: 'budget stage alone (6 + repeat_limit)', note: `${stageRepeat.toFixed(2)} µs per tools/call, in process` },
      ]
    } finally {
      await throttle.close()
      await allow.close()
      await off.close()
      await upstream.close()
    }
  },
}

/**
 * What the stage charges for one call of echo by `identity` of tenant acme, every bucket at HUGE: each
 * window of the tool, tenant and identity buckets, in check order.
 */
export function echoCharges(windowsSeconds: readonly number[], cost: number, identity = 'bench'): BucketCharge[] {
  const tier = (key: string, kind: BucketKind, name: string): BucketCharge[] =>
    windowsSeconds.map((w) => ({ key: windowKey(key, w), kind, name, limit: HUGE, windowSeconds: w, cost, charged: true }))
  return [
    ...tier(toolKey('echo'), 'tool', 'echo'),
    ...tier(tenantKey('acme'), 'tenant', 'acme'),
    ...tier(identityKey('acme', identity), 'identity', identity),
  ]
}

/** Microseconds per MemoryBudgetStore admit of `charges`, on this thread, over IN_PROCESS_MS. */
function checkMicroseconds(charges: readonly BucketCharge[]): number {
  const store = new MemoryBudgetStore()
  for (let i = 0; i < 10_000; i++) store.admitNow(charges)
  let n = 0
  const started = performance.now()
  while (performance.now() - started < IN_PROCESS_MS) {
    for (let i = 0; i < 1000; i++) store.admitNow(charges)
    n += 1000
  }
  return ((performance.now() - started) * 1000) / n
}

/**
 * Microseconds per budget stage run on an admitted tools/call (charges built, store checked, RateLimit
 * fields written; the memory store needs no deadline) with `budget` as the config's budget: block, over
 * IN_PROCESS_MS: the stage's share of a request, without the HTTP noise of a shared machine.
 */
async function stageMicroseconds(budget: object): Promise<number> {
  const config = parseConfig(`upstream: http://127.0.0.1:1\nauth: { mode: header }\nbudget: ${JSON.stringify(budget)}\n`, { env: {} })
  const stage = budgetStage(new MemoryBudgetStore(), config.budget, new BudgetMetrics(), silentLogger())
  // The call as the JSON-RPC stage reads it: the loop breaker hashes the arguments at its byte range.
  const body = Buffer.from(TOOL_CALL_BODY)
  const parsed = parseMessages(body, config.limits)
  if (!parsed.ok) throw new Error(`the bench tools/call does not parse: ${parsed.reason}`)
  const call = parsed.calls[0]
  const exchange = (): Exchange => {
    const ex = new Exchange({ headers: {} } as IncomingMessage, {} as ServerResponse, 'bench', Date.now(), performance.now())
    ex.principal = { identity: 'bench', tenant: 'acme' }
    ex.body = body
    ex.calls = [call]
    return ex
  }
  for (let i = 0; i < 10_000; i++) await stage.run(exchange())
  let n = 0
  const started = performance.now()
  while (performance.now() - started < IN_PROCESS_MS) {
    for (let i = 0; i < 1000; i++) await stage.run(exchange())
    n += 1000
  }
  return ((performance.now() - started) * 1000) / n
}

export const sections: BenchSection[] = [budget]
