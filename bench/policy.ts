/**
 * Policy micro-benchmark: nanoseconds per decision (CompiledPolicy.match) with 10 and 1,000 rules, the
 * compiled lookup next to a plain first-to-last scan of the same rules, so "cost stays flat as rules
 * grow" is a measured figure. No HTTP: the gateway's own overhead is the core section's business.
 *
 * Part of `npm run bench` (bench/run.ts loads `sections`), or on its own:
 *   node dist/bench/policy.js            (BENCH_QUICK=1 for a smoke run)
 */
import type { Effect, PolicyConfig, PolicyRule } from '../src/config/types'
import { type CompiledPolicy, compilePolicy } from '../src/policy/compile'
import { Glob } from '../src/glob'
import type { BenchRow, BenchSection } from './load'

type Call = readonly [identity: string, tenant: string, method: string, target: string]

export interface PolicyBenchResult {
  readonly rules: number
  readonly shape: PolicyShape
  /** Median over the rounds, ns per decision. */
  readonly compiledNs: number
  readonly linearNs: number
  /** Time to compile the rules once (median), ms. */
  readonly compileMs: number
}

/**
 * `typical`: a policy shaped like a real one: per-identity and per-tenant rules over many tools,
 * resources and prompts, a few identity families (`svc-*`, `ci-*`…) entitled to their own tools, and two
 * catch-alls at the end that every call walks past.
 * `globs`: the documented worst case, every rule with a `*` in both identity and target, so no lookup
 * map applies and the rules are tried one by one (docs/policy.md, "Limits").
 */
export type PolicyShape = 'typical' | 'globs'

const FAMILIES = ['svc-*', 'ci-*', '*-bot', 'ops-*']

export function syntheticPolicy(ruleCount: number, shape: PolicyShape = 'typical'): PolicyConfig {
  const rules: PolicyRule[] = []
  const effect = (i: number): Effect => (i % 3 === 0 ? 'deny' : 'allow')
  for (let i = 0; rules.length < ruleCount - 2; i++) {
    if (shape === 'globs') {
      rules.push({ identity: `svc-${i}-*`, tenant: null, method: 'tools/call', target: `tool_${i}_*`, server: '*', effect: effect(i) })
      continue
    }
    switch (i % 5) {
      case 0:
        rules.push({ identity: `user-${i}`, tenant: null, method: 'tools/call', target: `tool-${i % 50}`, server: '*', effect: effect(i) })
        break
      case 1:
        rules.push({
          identity: `user-${i}`,
          tenant: `tenant-${i % 20}`,
          method: 'tools/call',
          target: `read_${i}_*`,
          server: '*',
          effect: effect(i),
        })
        break
      case 2:
        rules.push({
          identity: FAMILIES[i % FAMILIES.length],
          tenant: null,
          method: 'tools/call',
          target: `tool-${i}`,
          server: '*',
          effect: effect(i),
        })
        break
      case 3:
        rules.push({
          identity: '*',
          tenant: `tenant-${i}`,
          method: 'resources/read',
          target: `example://${i}/*`,
          server: '*',
          effect: effect(i),
        })
        break
      default:
        rules.push({ identity: `user-${i}`, tenant: null, method: 'prompts/get', target: `prompt-${i}`, server: '*', effect: effect(i) })
    }
  }
  rules.push({ identity: 'ci-*', tenant: null, method: '*', target: 'admin_*', server: '*', effect: 'deny' })
  rules.push({ identity: '*', tenant: 'trial', method: 'tools/call', target: '*', server: '*', effect: 'deny' })
  return { default: 'allow', rules, source: 'bench', filterLists: true }
}

/** Calls that hit rules at every depth of the list, and as many that match none (the default decides). */
export function syntheticCalls(policy: PolicyConfig, count: number): Call[] {
  const calls: Call[] = []
  let seed = 7
  const next = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648
  const concrete = (pattern: string): string => pattern.replace(/\*/g, 'x')
  for (let i = 0; i < count; i++) {
    if (i % 2 === 0 && policy.rules.length > 0) {
      const rule = policy.rules[Math.floor(next() * policy.rules.length)]
      const method = rule.method.includes('*') ? 'resources/read' : rule.method
      calls.push([concrete(rule.identity), rule.tenant === null ? 'acme' : concrete(rule.tenant), method, concrete(rule.target)])
    } else {
      calls.push([`someone-${i}`, `tenant-${i % 7}`, i % 4 === 1 ? 'resources/read' : 'tools/call', `tool-${i % 97}`])
    }
  }
  return calls
}

/** The plain reading of the rules (first to last), patterns compiled once: what the lookup maps replace. */
function linearScan(policy: PolicyConfig): (call: Call) => number {
  const rules = policy.rules.map((rule) => ({
    method: rule.method,
    family: rule.method.endsWith('/*') ? rule.method.slice(0, -1) : null,
    identity: new Glob(rule.identity),
    tenant: rule.tenant === null ? null : new Glob(rule.tenant),
    tool: new Glob(rule.target),
  }))
  return ([identity, tenant, method, target]) => {
    for (let i = 0; i < rules.length; i++) {
      const r = rules[i]
      const methodOk = r.method === '*' || r.method === method || (r.family !== null && method.startsWith(r.family))
      if (methodOk && r.identity.matches(identity) && (r.tenant === null || r.tenant.matches(tenant)) && r.tool.matches(target)) return i
    }
    return -1
  }
}

function nsPerDecision(decide: (call: Call) => number, calls: readonly Call[], decisions: number): number {
  let sink = 0
  const started = process.hrtime.bigint()
  for (let n = 0; n < decisions; n++) sink += decide(calls[n % calls.length])
  const elapsed = Number(process.hrtime.bigint() - started)
  if (sink === Number.MIN_SAFE_INTEGER) process.stderr.write('') // keeps `sink` alive
  return elapsed / decisions
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b)
  const mid = s.length >> 1
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}

/** Measures one rule count: rounds alternate compiled and linear so a noisy neighbour hits both alike. */
export function measurePolicy(
  ruleCount: number,
  options: { rounds?: number; decisionsPerRound?: number; shape?: PolicyShape } = {},
): PolicyBenchResult {
  const rounds = options.rounds ?? 7
  const decisions = options.decisionsPerRound ?? 200_000
  const shape = options.shape ?? 'typical'
  const policy = syntheticPolicy(ruleCount, shape)
  const calls = syntheticCalls(policy, 512)
  const compileTimes: number[] = []
  let compiled: CompiledPolicy = compilePolicy(policy)
  for (let i = 0; i < rounds; i++) {
    const started = performance.now()
    compiled = compilePolicy(policy)
    compileTimes.push(performance.now() - started)
  }
  const viaMaps = (call: Call): number => compiled.match(call[0], call[1], call[2], call[3])
  const viaScan = linearScan(policy)
  for (const call of calls) {
    if (viaMaps(call) !== viaScan(call)) throw new Error(`policy bench: compiled and linear disagree on ${JSON.stringify(call)}`)
  }
  // Warm both paths up so the first measured round is not the JIT's.
  nsPerDecision(viaMaps, calls, decisions / (shape === 'globs' ? 40 : 4))
  nsPerDecision(viaScan, calls, decisions / 40)
  // A scan of 1,000 rules is far slower: fewer decisions keep its rounds short; ns/decision stays comparable.
  const scanDecisions = Math.max(1_000, Math.floor(decisions / Math.max(1, ruleCount / 10)))
  const mapDecisions = shape === 'globs' ? scanDecisions : decisions
  const compiledNs: number[] = []
  const linearNs: number[] = []
  for (let i = 0; i < rounds; i++) {
    compiledNs.push(nsPerDecision(viaMaps, calls, mapDecisions))
    linearNs.push(nsPerDecision(viaScan, calls, scanDecisions))
  }
  return { rules: ruleCount, shape, compiledNs: median(compiledNs), linearNs: median(linearNs), compileMs: median(compileTimes) }
}

export const RULE_COUNTS = [10, 1_000]

function rows(results: readonly PolicyBenchResult[], worst: PolicyBenchResult, rounds: number): BenchRow[] {
  const out: BenchRow[] = results.map((r) => ({
    label: `policy decision, ${r.rules.toLocaleString('en')} rules`,
    note: `${r.compiledNs.toFixed(0)} ns compiled, ${r.linearNs.toFixed(0)} ns first-to-last scan; compile ${r.compileMs.toFixed(2)} ms (medians of ${rounds} rounds)`,
  }))
  if (results.length >= 2) {
    const first = results[0]
    const last = results[results.length - 1]
    out.push({
      label: `policy ${last.rules} rules / ${first.rules} rules`,
      note: `compiled ×${(last.compiledNs / first.compiledNs).toFixed(2)}, scan ×${(last.linearNs / first.linearNs).toFixed(1)}`,
    })
  }
  out.push({
    label: `policy worst case, ${worst.rules.toLocaleString('en')} all-glob rules`,
    note: `${worst.compiledNs.toFixed(0)} ns compiled, ${worst.linearNs.toFixed(0)} ns scan: no index applies (docs/policy.md, Limits)`,
  })
  return out
}

export const sections: BenchSection[] = [
  {
    name: 'policy',
    budgetSeconds: 12,
    run(ctx) {
      const rounds = Math.max(3, ctx.rounds + 2)
      const decisionsPerRound = ctx.rounds <= 2 ? 50_000 : 200_000
      ctx.progress(`policy: ${rounds} rounds of ${decisionsPerRound} decisions per rule count (${RULE_COUNTS.join(', ')})`)
      const results = RULE_COUNTS.map((n) => measurePolicy(n, { rounds, decisionsPerRound }))
      return Promise.resolve(rows(results, measurePolicy(1_000, { rounds, decisionsPerRound, shape: 'globs' }), rounds))
    },
  },
]

if (require.main === module) {
  const quick = process.env.BENCH_QUICK === '1'
  const rounds = quick ? 3 : 7
  const decisionsPerRound = quick ? 50_000 : 200_000
  const results = RULE_COUNTS.map((n) => measurePolicy(n, { rounds, decisionsPerRound }))
  const worst = measurePolicy(1_000, { rounds, decisionsPerRound, shape: 'globs' })
  process.stdout.write(`wardline policy bench: node ${process.version}\n`)
  for (const row of rows(results, worst, rounds)) process.stdout.write(`${row.label.padEnd(44)} ${row.note}\n`)
}
