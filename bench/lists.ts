/**
 * List filtering's cost (docs/policy.md, "Lists show only what the caller may use"; figures under
 * "Performance"), on a 100-tool tools/list answer of realistic entries (a name, a description, an
 * input schema with a few properties: ~365 bytes each), under a 101-rule policy (bench/policy.ts's
 * typical shape plus one rule that hides every write_* tool from the caller "reader"):
 * - in process: the list-filter stage's onMessage (filterListMessage judging each entry) with nothing
 *   hidden and with half hidden, next to JSON.parse of the same text (the floor: the filter must
 *   parse the answer to judge it) and the 100 policy decisions alone;
 * - over HTTP: tools/list through a gateway with filter_lists true and one with false, same policy,
 *   as JSON and as an SSE event, at 32 in flight and (JSON) one at a time;
 * - the allow path: the usual tools/call through the same two gateways. The list filter declares no
 *   interest in tools/call answers, so the ratio should be 1.00 within noise; the same in process
 *   (the policy stages, answer plan and finish phase with and without the filter) gives the
 *   nanoseconds the HTTP noise hides.
 *
 * Two sections: `lists` (in process, ~2.5 s, small enough to fit in `npm run bench` after the other
 * sections) and `lists-http` (~20 s; the full run skips it when the others leave no room under the
 * two-minute cap). Both: `BENCH_ONLY=lists,lists-http node dist/bench/run.js`.
 *
 * HTTP rounds are shorter than the core section's (ten scenarios in ~20 s), so each figure is
 * noisier than core's; the ratios are taken per round between scenarios run back to back.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { request } from 'undici'
import { parseConfig } from '../src/config/load'
import type { PolicyConfig } from '../src/config/types'
import { parseMessages } from '../src/jsonrpc/parse'
import { AnswerPlan } from '../src/pipeline/answer'
import { Exchange } from '../src/pipeline/exchange'
import { type Stage, finishStages, runStages } from '../src/pipeline/stage'
import { type CompiledPolicy, compilePolicy } from '../src/policy/compile'
import { type filterListMessage, listFilterStage, listFilterState } from '../src/policy/list-filter'
import { policyStage, policyVerdictStage } from '../src/policy/stage'
import { type BenchServer, TOOL_CALL_BODY, benchHeaders, startBenchGateway, startBenchWorker, toolCallLoad } from './fixtures'
import type { ListUpstreamJob } from './lists-upstream'
import { type BenchRow, type BenchSection, type LoadResult, median, runLoad, summarize } from './load'
import { syntheticPolicy } from './policy'

const TOOL_COUNT = 100
/** The caller the extra rule hides every write_* tool from: half of the list. */
const READER = 'reader'
/**
 * The session the tools/call load runs in, as a stateful SDK client calls. List calls carry none: 32
 * of them in flight with one id in one session would be refused (409, a reused id).
 */
const SESSION = 'bench-session'

type Judge = Parameters<typeof filterListMessage>[1]

/**
 * One tool as an MCP server lists it. Even indices read, odd ones write, so the hidden half is spread
 * through the array (one cut per entry, the costliest layout) rather than one block.
 */
function tool(i: number): object {
  const write = i % 2 === 1
  const noun = ['file', 'issue', 'ticket', 'record', 'page'][i % 5]
  return {
    name: `${write ? 'write' : 'read'}_${noun}_${i}`,
    description: write
      ? `Creates or replaces a ${noun} in the workspace. Fails when the caller lacks write access or the ${noun} is locked.`
      : `Reads a ${noun} from the workspace and returns it as text. Use it before editing to see the current state.`,
    inputSchema: {
      type: 'object',
      properties: {
        id: { type: 'string', description: `The ${noun} to ${write ? 'write' : 'read'}` },
        offset: { type: 'integer', minimum: 0 },
        limit: { type: 'integer', minimum: 1, maximum: 500 },
      },
      required: ['id'],
    },
  }
}

/** The upstream's whole JSON answer to a tools/list (id 1, as the bench requests send), with a cursor to keep. */
export const LIST_ANSWER = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  result: { tools: Array.from({ length: TOOL_COUNT }, (_, i) => tool(i)), nextCursor: 'page-2' },
})

const LIST_BODY = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} })

/** syntheticPolicy(100) with the rule that hides write_* tools from READER in front. */
export function listPolicy(): PolicyConfig {
  const base = syntheticPolicy(100)
  return {
    ...base,
    rules: [{ identity: READER, tenant: null, method: 'tools/call', target: 'write_*', server: '*', effect: 'deny' }, ...base.rules],
  }
}

/** The same policy as an operator's YAML block, for the gateways. */
function policyTree(policy: PolicyConfig, filterLists: boolean): Record<string, unknown> {
  return {
    default: policy.default,
    filter_lists: filterLists,
    rules: policy.rules.map((r) => ({
      identity: r.identity,
      ...(r.tenant === null ? {} : { tenant: r.tenant }),
      method: r.method,
      tool: r.target,
      effect: r.effect,
    })),
  }
}

/** The policy part of the judge the list-filter stage builds for a caller (the decisions alone). */
function judgeFor(policy: CompiledPolicy, identity: string, tenant: string): Judge {
  return (kind, target) => policy.effectOf(policy.match(identity, tenant, kind.judgedAs, target)) === 'allow'
}

interface MicroResult {
  readonly parseUs: number
  readonly noneHiddenUs: number
  readonly halfHiddenUs: number
  readonly decisionsUs: number
}

/** Microseconds per call of `fn`, over about `ms`; `fn` returns a number so its work cannot be dropped. */
function microseconds(fn: () => number, ms: number): number {
  let n = 0
  let sink = 0
  const started = performance.now()
  while (performance.now() - started < ms) {
    for (let i = 0; i < 20; i++) sink += fn()
    n += 20
  }
  const elapsed = performance.now() - started
  if (sink === Number.MIN_SAFE_INTEGER) process.stderr.write('') // keeps `sink` alive
  return (elapsed * 1000) / n
}

/** The in-process figures: rounds alternate the four measures (order rotating), medians reported. */
export function measureMicro(rounds: number, ms: number): MicroResult {
  const compiled = compilePolicy(listPolicy())
  // The stage as the gateway runs it on a list answer (onMessage: the quick shape check, then
  // filterListMessage judging each entry, then the audit note), for two callers.
  const state = listFilterState()
  state.current = compiled
  const stage = listFilterStage(state)
  if (stage.onMessage === undefined) throw new Error('lists bench: the list-filter stage reads no messages')
  // Each exchange carries the tools/list call the answer belongs to, so the audit note lands on it.
  const config = parseConfig('upstream: http://127.0.0.1:1\nauth: { mode: header }\n', { env: {} })
  const exchangeOf = (identity: string): Exchange => {
    const ex = new Exchange({ method: 'POST', headers: {} } as IncomingMessage, {} as ServerResponse, 'bench', 0, 0)
    ex.principal = { identity, tenant: 'acme' }
    const parsed = parseMessages(Buffer.from(LIST_BODY), config.limits)
    if (!parsed.ok) throw new Error(`the bench tools/list does not parse: ${parsed.reason}`)
    ex.calls = parsed.calls
    return ex
  }
  const everyone = exchangeOf('bench')
  const reader = exchangeOf(READER)
  const filterFor = (ex: Exchange): string => {
    ex.calls[0].reason = '' // the audit note of the previous run, so the next one is noted too
    return stage.onMessage!(ex, LIST_ANSWER)
  }
  // The figures mean something only if the filter does what they claim: check once, before measuring.
  const half = filterFor(reader)
  const kept = (JSON.parse(half) as { result: { tools: unknown[]; nextCursor: string } }).result
  if (filterFor(everyone) !== LIST_ANSWER || everyone.calls[0].reason !== '')
    throw new Error('lists bench: the unhidden answer was changed')
  if (kept.tools.length !== TOOL_COUNT / 2 || kept.nextCursor !== 'page-2' || !reader.calls[0].reason.includes('50 of 100 tools hidden')) {
    throw new Error(`lists bench: the reader should see half the tools and the cursor (${reader.calls[0].reason})`)
  }
  const judge = judgeFor(compiled, READER, 'acme')
  const names = (JSON.parse(LIST_ANSWER) as { result: { tools: Array<{ name: string }> } }).result.tools.map((t) => t.name)
  const kind: Parameters<Judge>[0] = { key: 'tools', field: 'name', judgedAs: 'tools/call', method: 'tools/list' }
  const measures: Record<keyof MicroResult, () => number> = {
    parseUs: () => (JSON.parse(LIST_ANSWER) as { id: number }).id,
    noneHiddenUs: () => filterFor(everyone).length,
    halfHiddenUs: () => filterFor(reader).length,
    decisionsUs: () => {
      let allowed = 0
      for (let i = 0; i < names.length; i++) if (judge(kind, names[i])) allowed++
      return allowed
    },
  }
  const keys = Object.keys(measures) as Array<keyof MicroResult>
  // Warm every path up so the first measured round is not the JIT's.
  for (const key of keys) microseconds(measures[key], ms / 2)
  const samples: Record<string, number[]> = {}
  for (const key of keys) samples[key] = []
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < keys.length; i++) {
      const key = keys[(round + i) % keys.length]
      samples[key].push(microseconds(measures[key], ms))
    }
  }
  return {
    parseUs: median(samples.parseUs),
    noneHiddenUs: median(samples.noneHiddenUs),
    halfHiddenUs: median(samples.halfHiddenUs),
    decisionsUs: median(samples.decisionsUs),
  }
}

/**
 * Nanoseconds per admitted tools/call, in a session, for the policy stages' request and finish phases
 * and the answer plan (what differs between filter_lists true and false), without and with the
 * list-filter stage: the allow path's share of the filter, free of the HTTP figures' noise. Rounds
 * alternate, medians.
 */
export async function measureAllowPath(rounds: number, ms: number): Promise<{ withoutNs: number; withNs: number }> {
  const compiled = compilePolicy(listPolicy())
  const config = parseConfig('upstream: http://127.0.0.1:1\nauth: { mode: header }\n', { env: {} })
  const body = Buffer.from(TOOL_CALL_BODY)
  const parsed = parseMessages(body, config.limits)
  if (!parsed.ok) throw new Error(`the bench tools/call does not parse: ${parsed.reason}`)
  const call = parsed.calls[0]
  const chain = (stages: Stage[]) => ({ stages, plan: new AnswerPlan(stages) })
  const without = chain([policyStage(compiled), policyVerdictStage])
  const state = listFilterState()
  state.current = compiled
  const withFilter = chain([policyStage(compiled), listFilterStage(state), policyVerdictStage])
  // In a session, as a stateful SDK client calls: the filter then looks for list ids in flight.
  const req = { method: 'POST', headers: { 'mcp-session-id': SESSION } } as unknown as IncomingMessage
  const res = {} as ServerResponse
  const once = async ({ stages, plan }: ReturnType<typeof chain>): Promise<void> => {
    const ex = new Exchange(req, res, 'bench', 0, 0)
    ex.principal = { identity: 'bench', tenant: 'acme' }
    ex.body = body
    ex.calls = [call]
    if ((await runStages(stages, ex)) !== null) throw new Error('lists bench: the allow-path call was refused')
    plan.attach(ex)
    finishStages(stages, ex)
  }
  const nsPer = async (c: ReturnType<typeof chain>, forMs: number): Promise<number> => {
    let n = 0
    const started = performance.now()
    while (performance.now() - started < forMs) {
      for (let i = 0; i < 1000; i++) await once(c)
      n += 1000
    }
    return ((performance.now() - started) * 1e6) / n
  }
  await nsPer(without, ms / 2)
  await nsPer(withFilter, ms / 2)
  const a: number[] = []
  const b: number[] = []
  for (let round = 0; round < rounds; round++) {
    if (round % 2 === 0) {
      a.push(await nsPer(without, ms))
      b.push(await nsPer(withFilter, ms))
    } else {
      b.push(await nsPer(withFilter, ms))
      a.push(await nsPer(without, ms))
    }
  }
  return { withoutNs: median(a), withNs: median(b) }
}

/** The list upstream (bench/lists-upstream.ts) on port 0 in a worker thread. */
function startListUpstream(): Promise<BenchServer> {
  const job: ListUpstreamJob = { listAnswer: LIST_ANSWER }
  return startBenchWorker('lists-upstream.js', job, 'list upstream')
}

/** The tools this caller gets back through `base` (JSON or SSE answer). */
async function listedThrough(base: string, path: string, identity: string): Promise<{ tools: number; text: string }> {
  const res = await request(`${base}${path}`, { method: 'POST', headers: benchHeaders(identity), body: LIST_BODY })
  const body = await res.body.text()
  const text = body.startsWith('event:') ? body.slice(body.indexOf('data: ') + 6).trimEnd() : body
  if (res.statusCode !== 200) throw new Error(`lists bench: ${path} as ${identity} answered ${res.statusCode}: ${body.slice(0, 200)}`)
  return { tools: (JSON.parse(text) as { result: { tools: unknown[] } }).result.tools.length, text }
}

function listLoad(base: string, path: string, identity: string, durationMs: number, concurrency: number): () => Promise<LoadResult> {
  return () =>
    runLoad({
      url: `${base}${path}`,
      method: 'POST',
      headers: benchHeaders(identity),
      body: LIST_BODY,
      concurrency,
      durationMs,
      warmupMs: 100,
    })
}

/**
 * Each group's scenarios run back to back in every round (order rotating within the group), so a
 * burst of load from a neighbour hits a baseline and its variants alike; per round, each variant's
 * throughput is divided by its group's first scenario (the baseline). The median of those per-round
 * ratios is steadier on a shared machine than the ratio of two medians taken seconds apart.
 */
async function groupedRounds(
  rounds: number,
  groups: ReadonlyArray<Readonly<Record<string, () => Promise<LoadResult>>>>,
): Promise<{ results: Record<string, LoadResult[]>; ratios: Record<string, number[]> }> {
  const results: Record<string, LoadResult[]> = {}
  const ratios: Record<string, number[]> = {}
  for (const group of groups) {
    for (const name of Object.keys(group)) {
      results[name] = []
      ratios[name] = []
    }
  }
  for (let round = 0; round < rounds; round++) {
    for (const group of groups) {
      const names = Object.keys(group)
      const got: Record<string, LoadResult> = {}
      for (let i = 0; i < names.length; i++) {
        const name = names[(round + i) % names.length]
        got[name] = await group[name]()
        results[name].push(got[name])
      }
      for (const name of names) ratios[name].push(got[name].reqPerSec / got[names[0]].reqPerSec)
    }
  }
  return { results, ratios }
}

function versus(through: LoadResult, base: LoadResult, ratios: readonly number[]): string {
  const sorted = [...ratios].sort((a, b) => a - b)
  return (
    `×${median(ratios).toFixed(2)} req/s (rounds ×${sorted[0].toFixed(2)}–×${sorted[sorted.length - 1].toFixed(2)}), ` +
    `p50 ${signed(through.p50Ms - base.p50Ms)} ms, p99 ×${(through.p99Ms / base.p99Ms).toFixed(2)} of filter off`
  )
}

function signed(n: number): string {
  return `${n >= 0 ? '+' : ''}${n.toFixed(2)}`
}

/** In process: what the filter costs per list answer, and per tools/call on the allow path. */
const inProcess: BenchSection = {
  name: 'lists',
  // ~2.5 s: small enough to fit in `npm run bench` after the other sections.
  budgetSeconds: 5,
  async run(ctx) {
    const rounds = ctx.rounds + 2
    const ms = ctx.rounds <= 2 ? 25 : 50
    ctx.progress(`lists: in process, ${rounds} rounds of ${ms} ms per measure`)
    const micro = measureMicro(rounds, ms)
    const allow = await measureAllowPath(rounds, ms)
    const times = (us: number): string => `×${(us / micro.parseUs).toFixed(2)} of JSON.parse`
    const kb = (LIST_ANSWER.length / 1024).toFixed(1)
    return [
      {
        label: `${TOOL_COUNT}-tool tools/list (${kb} KiB): JSON.parse`,
        note: `${micro.parseUs.toFixed(1)} µs (median of ${rounds} rounds)`,
      },
      { label: 'list filter, nothing hidden', note: `${micro.noneHiddenUs.toFixed(1)} µs, ${times(micro.noneHiddenUs)}` },
      { label: 'list filter, 50 of 100 hidden', note: `${micro.halfHiddenUs.toFixed(1)} µs, ${times(micro.halfHiddenUs)}` },
      { label: `${TOOL_COUNT} policy decisions alone (${listPolicy().rules.length} rules)`, note: `${micro.decisionsUs.toFixed(1)} µs` },
      {
        label: 'allow path: policy stages + answer plan',
        note: `${allow.withoutNs.toFixed(0)} ns filter off, ${allow.withNs.toFixed(0)} ns on: ${signed(allow.withNs - allow.withoutNs)} ns per tools/call`,
      },
    ]
  },
}

/** Over HTTP: tools/list and tools/call through a gateway with filter_lists true and one with false. */
const overHttp: BenchSection = {
  name: 'lists-http',
  // ~20 s on a quiet machine (40 list rounds of 0.25 s, 10 call rounds of 0.7 s with toolCallLoad's
  // warm-up, ~1.5 s of startups): the margin is for a busy one.
  budgetSeconds: 25,
  async run(ctx) {
    const policy = listPolicy()
    const upstream = await startListUpstream()
    // Started together: each takes ~0.7 s to load in its worker.
    const [off, on] = await Promise.all([
      startBenchGateway(upstream.url, { policy: policyTree(policy, false) }),
      startBenchGateway(upstream.url, { policy: policyTree(policy, true) }),
    ])
    try {
      const direct = await listedThrough(upstream.url, '/mcp', READER)
      const checks = [
        [await listedThrough(off.url, '/mcp', READER), TOOL_COUNT],
        [await listedThrough(on.url, '/mcp', READER), TOOL_COUNT / 2],
        [await listedThrough(on.url, '/mcp-sse', READER), TOOL_COUNT / 2],
        [await listedThrough(on.url, '/mcp', 'bench'), TOOL_COUNT],
      ] as const
      for (const [seen, expected] of checks) {
        if (seen.tools !== expected) throw new Error(`lists bench: expected ${expected} tools through the gateway, got ${seen.tools}`)
      }
      if (checks[3][0].text !== direct.text) throw new Error('lists bench: an answer with nothing hidden was not passed byte for byte')

      const listMs = Math.round(ctx.roundMs * 0.15)
      const callMs = Math.round(ctx.roundMs * 0.4)
      ctx.progress(`lists-http: ${ctx.rounds} rounds of ${listMs} ms per tools/list scenario, then of ${callMs} ms per tools/call scenario`)
      const c = ctx.concurrency
      const lists = await groupedRounds(ctx.rounds, [
        {
          jsonOff: listLoad(off.url, '/mcp', READER, listMs, c),
          jsonNone: listLoad(on.url, '/mcp', 'bench', listMs, c),
          jsonHalf: listLoad(on.url, '/mcp', READER, listMs, c),
        },
        { sseOff: listLoad(off.url, '/mcp-sse', READER, listMs, c), sseHalf: listLoad(on.url, '/mcp-sse', READER, listMs, c) },
        // One at a time: the latency a list answer gains when the gateway is not saturated (at 32 in
        // flight, p50 mostly reflects the lower throughput).
        {
          oneOff: listLoad(off.url, '/mcp', READER, listMs, 1),
          oneNone: listLoad(on.url, '/mcp', 'bench', listMs, 1),
          oneHalf: listLoad(on.url, '/mcp', READER, listMs, 1),
        },
      ])
      const load = toolCallLoad({ ...ctx, roundMs: callMs }, { ...benchHeaders(), 'mcp-session-id': SESSION })
      const calls = await groupedRounds(ctx.rounds, [{ off: load(off.url), on: load(on.url) }])

      const row = (label: string, name: string, base?: string, rounds = lists): BenchRow => {
        const result = summarize(rounds.results[name])
        if (base === undefined) return { label, result }
        return { label, result, note: versus(result, summarize(rounds.results[base]), rounds.ratios[name]) }
      }
      return [
        row('tools/list JSON, filter_lists false', 'jsonOff'),
        row('tools/list JSON, filter on, none hidden', 'jsonNone', 'jsonOff'),
        row('tools/list JSON, filter on, 50 hidden', 'jsonHalf', 'jsonOff'),
        row('tools/list SSE, filter_lists false', 'sseOff'),
        row('tools/list SSE, filter on, 50 hidden', 'sseHalf', 'sseOff'),
        row('tools/list JSON, 1 in flight, filter off', 'oneOff'),
        row('tools/list JSON, 1 in flight, none hidden', 'oneNone', 'oneOff'),
        row('tools/list JSON, 1 in flight, 50 hidden', 'oneHalf', 'oneOff'),
        row('tools/call, filter_lists false', 'off', undefined, calls),
        row('tools/call, filter_lists true', 'on', 'off', calls),
      ]
    } finally {
      await on.close()
      await off.close()
      await upstream.close()
    }
  },
}

export const sections: BenchSection[] = [inProcess, overHttp]
