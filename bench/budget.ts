/**
 * Budget enforcement's cost (the target: under 5% of throughput): tools/call through a gateway
 * with budgets off, with budgets on and every call admitted (tool, tenant and identity buckets all
 * charged: the most work a check does), and with every call throttled (the 429 the gateway answers
 * itself, never forwarded). Plus the check alone, in process, without HTTP.
 */
import { identityKey, tenantKey, toolKey } from '../src/budget/keys'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { MemoryBudgetStore } from '../src/budget/memory-store'
import { budgetStage } from '../src/budget/stage'
import { parseConfig } from '../src/config/load'
import { silentLogger } from '../src/log'
import { Metrics } from '../src/metrics'
import { Exchange } from '../src/pipeline/exchange'
import { startBenchGateway, startRawUpstream, toolCallLoad } from './fixtures'
import { type BenchSection, interleave, summarize } from './load'

/** Every bucket kind applies to the bench caller (identity "bench", tenant "acme", tool "echo"). */
const ALL_BUCKETS = (limit: number) => ({
  requests_per_window: limit,
  window_seconds: 60,
  tenants: { acme: { requests_per_window: limit, window_seconds: 60 } },
  tools: { echo: { requests_per_window: limit, window_seconds: 60 } },
})

const budget: BenchSection = {
  name: 'budget',
  budgetSeconds: 25,
  async run(ctx) {
    const upstream = await startRawUpstream()
    const off = await startBenchGateway(upstream.url, { features: { budget_enforcement: false } })
    const allow = await startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: ALL_BUCKETS(1_000_000_000) })
    const throttle = await startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: ALL_BUCKETS(1) })
    try {
      const load = toolCallLoad(ctx)
      ctx.progress(`budget: ${ctx.rounds} rounds of ${ctx.roundMs} ms each for off / on (allowed) / on (throttled)`)
      const rounds = await interleave(ctx.rounds, { off: load(off.url), allow: load(allow.url), throttle: load(throttle.url) })
      const o = summarize(rounds.off)
      const a = summarize(rounds.allow)
      const t = summarize(rounds.throttle)
      const checkUs = checkMicroseconds()
      const stageUs = await stageMicroseconds()
      return [
        { label: 'tools/call, budget off', result: o },
        {
          label: 'tools/call, budget on, admitted (3 buckets)',
          result: a,
          note: `×${(a.reqPerSec / o.reqPerSec).toFixed(3)} of budget off`,
        },
        { label: 'tools/call, budget on, throttled (429)', result: t, note: `×${(t.reqPerSec / o.reqPerSec).toFixed(3)} of budget off` },
        { label: 'memory store check alone (3 buckets)', note: `${checkUs.toFixed(2)} µs per admit, in process` },
        { label: 'budget stage alone (3 buckets, headers)', note: `${stageUs.toFixed(2)} µs per tools/call, in process` },
      ]
    } finally {
      await throttle.close()
      await allow.close()
      await off.close()
      await upstream.close()
    }
  },
}

/** Microseconds per MemoryBudgetStore admit of three buckets, on this thread, over ~200 ms. */
function checkMicroseconds(): number {
  const store = new MemoryBudgetStore()
  const charges = [
    { key: toolKey('echo'), kind: 'tool' as const, name: 'echo', limit: 1e12, windowSeconds: 60, cost: 1 },
    { key: tenantKey('acme'), kind: 'tenant' as const, name: 'acme', limit: 1e12, windowSeconds: 60, cost: 1 },
    { key: identityKey('acme', 'bench'), kind: 'identity' as const, name: 'bench', limit: 1e12, windowSeconds: 60, cost: 1 },
  ]
  for (let i = 0; i < 10_000; i++) store.admitNow(charges)
  let n = 0
  const started = performance.now()
  while (performance.now() - started < 200) {
    for (let i = 0; i < 1000; i++) store.admitNow(charges)
    n += 1000
  }
  return ((performance.now() - started) * 1000) / n
}

/**
 * Microseconds per budget stage run on an admitted tools/call (charges built, deadline armed, store
 * checked, RateLimit fields written), over ~200 ms: the stage's share of a request, without the
 * HTTP noise of a shared machine.
 */
async function stageMicroseconds(): Promise<number> {
  const config = parseConfig(
    `upstream: http://127.0.0.1:1\nauth: { mode: header }\nbudget: ${JSON.stringify(ALL_BUCKETS(1_000_000_000))}\n`,
    { env: {} },
  )
  const stage = budgetStage(new MemoryBudgetStore(), config.budget, new Metrics(), silentLogger())
  const call = { id: 1, method: 'tools/call', target: 'echo', gated: true, reason: '' }
  const exchange = (): Exchange => {
    const ex = new Exchange({ headers: {} } as IncomingMessage, {} as ServerResponse, 'bench', Date.now(), performance.now())
    ex.principal = { identity: 'bench', tenant: 'acme' }
    ex.calls = [call]
    return ex
  }
  for (let i = 0; i < 10_000; i++) await stage.run(exchange())
  let n = 0
  const started = performance.now()
  while (performance.now() - started < 200) {
    for (let i = 0; i < 1000; i++) await stage.run(exchange())
    n += 1000
  }
  return ((performance.now() - started) * 1000) / n
}

export const sections: BenchSection[] = [budget]
