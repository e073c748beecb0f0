/**
 * What routing by server name costs (`servers:`, /mcp/<name>): the allow path through a gateway whose
 * `servers:` names 1 and 50 servers (the route is the last name), against the same gateway with
 * `upstream:` alone, in one run and in the core section's setting (every stage on, each proxy in a
 * child process of its own pinned away from the load generator, CPU µs per request from the proxy's
 * own counters). The difference routing makes is far below what a whole request costs, so the HTTP
 * figures can only show it stays within noise; the in-process rows measure it directly: the
 * Router's dispatch (path read, map lookup, upstream path) in ns per call, and the per-server header
 * replacement with and without configured headers.
 *
 * `npm run build && BENCH_ONLY=routing node dist/bench/run.js`
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import type { AuditTrail } from '../src/audit/trail'
import type { ServerConfig } from '../src/config/types'
import { silentLogger } from '../src/log'
import { CONTINUE, type Stage } from '../src/pipeline/stage'
import type { RouteConfig, SharedStages } from '../src/server/chain'
import type { Gateway } from '../src/server/gateway'
import type { RouteFeature } from '../src/server/route'
import { Router, serverTarget } from '../src/server/router'
import { upstreamRequestHeaders } from '../src/upstream/headers'
import { benchToken } from './auth'
import { TOOL_CALL_BODY, benchHeaders } from './fixtures'
import { type BenchContext, type BenchRow, type BenchSection, type LoadResult, interleave, median, runLoad } from './load'
import {
  type ProcessServer,
  type Summary,
  costs,
  everyStageOn,
  measuredRound,
  pinSelf,
  pinning,
  signed,
  startProcessServer,
  summarizeRounds,
} from './speed'
import type { ServerJob } from './servers'

const CONNECTIONS = 50
const FIRST_WARMUP_MS = 600
const WARMUP_MS = 200
/** Of the run's round length: three targets in rounds of the full length would pass the section's 30 s. */
const ROUND_SHARE = 0.6
/** Server counts measured; each routes to its last name, so a larger map is searched for a name it holds. */
const COUNTS = [1, 50] as const

const nameOf = (i: number): string => `server-${i}`
const lastName = (count: number): string => nameOf(count)

/**
 * The core section's stages (JWT with its cache, identity and tenant budgets, policy, JSONL audit),
 * without the per-tool budget: with `servers:` its keys name a server too, and the same tree must
 * serve both shapes so the only difference measured is the routing.
 */
function stages(): Record<string, unknown> {
  const tree = everyStageOn()
  const { tools: _tools, ...budget } = tree.budget as Record<string, unknown>
  return { ...tree, budget }
}

/** A gateway with `servers:` naming `count` servers, every one at the bench upstream's /mcp. */
function serversJob(upstreamUrl: string, count: number): ServerJob {
  const servers: Record<string, { url: string }> = {}
  for (let i = 1; i <= count; i++) servers[nameOf(i)] = { url: `${upstreamUrl}/mcp` }
  return { kind: 'gateway', upstreamUrl, tree: { ...stages(), servers } }
}

interface Target {
  readonly label: string
  readonly path: string
  readonly job: ServerJob
}

async function httpRows(ctx: BenchContext): Promise<BenchRow[]> {
  const pins = pinning()
  const cores = pins?.servers ?? null
  const headers = { ...benchHeaders(), authorization: `Bearer ${await benchToken()}` }
  const upstream = await startProcessServer({ kind: 'upstream' }, cores)
  const started: ProcessServer[] = [upstream]
  if (pins !== null) pinSelf(pins.load)
  try {
    const targets: Record<string, Target> = {
      upstream: { label: 'upstream: (no routing)', path: '/mcp', job: { kind: 'gateway', upstreamUrl: upstream.url, tree: stages() } },
    }
    for (const count of COUNTS) {
      targets[`servers${count}`] = {
        label: `servers: ${count}, routed to /mcp/${lastName(count)}`,
        path: `/mcp/${lastName(count)}`,
        job: serversJob(upstream.url, count),
      }
    }
    const names = Object.keys(targets)
    const servers: Record<string, ProcessServer> = {}
    // Started together: on a loaded machine each start takes seconds, and the section has a deadline.
    await Promise.all(
      names.map(async (name) => {
        servers[name] = await startProcessServer(targets[name].job, cores)
        started.push(servers[name])
      }),
    )
    const closed = (name: string, durationMs: number) => (): Promise<LoadResult> =>
      runLoad({
        url: `${servers[name].url}${targets[name].path}`,
        method: 'POST',
        headers,
        body: TOOL_CALL_BODY,
        concurrency: CONNECTIONS,
        durationMs,
      })
    const roundMs = Math.round(ctx.roundMs * ROUND_SHARE)
    ctx.progress(
      `routing: ${ctx.rounds} rounds of ${roundMs} ms, ${names.join(', ')} (every stage on), ${CONNECTIONS} connections; ` +
        (pins === null ? 'no CPU pinning on this machine' : `load on CPU ${pins.load}, servers on CPU ${pins.servers}`),
    )
    for (const name of names) {
      const warm = await closed(name, FIRST_WARMUP_MS)()
      // A route that answers anything but 200 would measure a refusal, not the allow path.
      if (Object.keys(warm.statuses).some((s) => s !== '200'))
        throw new Error(`${targets[name].label}: statuses ${JSON.stringify(warm.statuses)}, expected only 200`)
    }
    const rounds = await interleave(
      ctx.rounds,
      Object.fromEntries(names.map((name) => [name, () => measuredRound(servers[name], closed(name, roundMs), closed(name, WARMUP_MS))])),
    )
    const summary: Record<string, Summary> = {}
    for (const name of names) summary[name] = summarizeRounds(rounds[name])
    const base = summary.upstream
    const rows: BenchRow[] = names.map((name) => ({
      label: `tools/call, ${targets[name].label}`,
      result: summary[name].load,
      note: costs(summary[name]),
    }))
    for (const count of COUNTS) rows.push(versus(`servers: ${count} / upstream:`, summary[`servers${count}`], base))
    rows.push(versus(`servers: 50 / servers: 1`, summary.servers50, summary.servers1))
    rows.push({
      label: 'noise: upstream: CPU per request over rounds',
      note: `${base.cpuSpread[0].toFixed(1)}–${base.cpuSpread[1].toFixed(1)} µs (a difference inside this range is not a cost)`,
    })
    return rows
  } finally {
    if (pins !== null) pinSelf(pins.all)
    await Promise.all(started.map((s) => s.close()))
  }
}

function versus(label: string, a: Summary, b: Summary): BenchRow {
  return {
    label,
    note:
      `CPU per request ×${(a.cpuUs / b.cpuUs).toFixed(3)} (${signed(a.cpuUs - b.cpuUs)} µs), ` +
      `throughput ×${(a.load.reqPerSec / b.load.reqPerSec).toFixed(3)}, p50 ×${(a.load.p50Ms / b.load.p50Ms).toFixed(2)}, ` +
      `p99 ×${(a.load.p99Ms / b.load.p99Ms).toFixed(2)}`,
  }
}

// ---- In process: the routing itself, in ns per call ------------------------------------------------

/** A route whose gateway only takes note of the path it was handed: what remains is the Router's own work. */
function stubFeature(config: RouteConfig, sink: { path: string | null }): RouteFeature {
  const done = Promise.resolve()
  const gateway = {
    handle: (_req: IncomingMessage, _res: ServerResponse, path: string | null = null) => {
      sink.path = path
      return done
    },
    inFlight: 0,
  } as unknown as Gateway
  return { config, gateway, firstProbe: done, reload: () => undefined, stopProbe: () => done, closers: [], readiness: [] }
}

function stubRouter(count: number, sink: { path: string | null }): Router {
  const pass: Stage = { name: 'pass', run: () => CONTINUE }
  const shared = { http: pass, auth: pass, revocation: pass } as unknown as SharedStages
  const routes: RouteConfig[] = []
  for (let i = 1; i <= count; i++) {
    const upstream = { name: nameOf(i), url: 'http://127.0.0.1:1/mcp', transport: 'streamable', headers: {} } as unknown as ServerConfig
    routes.push({ server: nameOf(i), upstream, budget: {} as RouteConfig['budget'], policy: null, toolRefusals: 'http' })
  }
  return new Router(routes, null, {
    shared,
    audit: {} as AuditTrail,
    log: silentLogger(),
    open: (config) => stubFeature(config, sink),
  })
}

/**
 * ns of CPU per call of `op`, over batches of calls until about `ms` of this process's CPU time is
 * spent: CPU time, not wall time, so the time this process waits for a core on a shared machine is
 * not counted as cost (nothing else runs in it meanwhile: the servers start after). `op` returns
 * something kept alive so the loop is not optimised away.
 */
function nsPerCall(op: () => unknown, ms: number): number {
  let sink: unknown = null
  let calls = 0
  let usedUs: number
  const start = process.cpuUsage()
  do {
    for (let i = 0; i < BATCH; i++) sink = op()
    calls += BATCH
    const used = process.cpuUsage(start)
    usedUs = used.user + used.system
  } while (usedUs < ms * 1000)
  if (sink === Symbol.iterator) process.stderr.write('')
  return (usedUs * 1000) / calls
}

const BATCH = 10_000

/** Headers a typical SDK client sends on a tools/call, as Node hands them over. */
const RAW_HEADERS = [
  'Host',
  '127.0.0.1:8080',
  'Content-Type',
  'application/json',
  'Accept',
  'application/json, text/event-stream',
  'Content-Length',
  '92',
  'Authorization',
  'Bearer abc.def.ghi',
  'Mcp-Session-Id',
  '1f0e2d3c-4b5a-6978-8796-a5b4c3d2e1f0',
  'Mcp-Protocol-Version',
  '2025-06-18',
  'User-Agent',
  'node',
  'Connection',
  'keep-alive',
]
const PARSED_HEADERS: IncomingHttpHeaders = { connection: 'keep-alive' }

function microRows(ctx: BenchContext): BenchRow[] {
  const rounds = Math.max(3, ctx.rounds)
  const roundMs = ctx.rounds <= 2 ? 10 : 25
  const sink = { path: null as string | null }
  const res = {} as ServerResponse
  const ops: Record<string, () => unknown> = {}
  const direct = stubFeature({} as RouteConfig, sink).gateway
  const upstreamReq = { url: '/mcp' } as IncomingMessage
  // upstream: alone: the listener hands the request to the one route's gateway.
  ops.direct = () => direct.handle(upstreamReq, res)
  for (const count of COUNTS) {
    const router = stubRouter(count, sink)
    const req = { url: `/mcp/${lastName(count)}` } as IncomingMessage
    const map = new Map([...router.routes].map(([name]) => [name, { name }]))
    const url = req.url ?? ''
    ops[`router${count}`] = () => router.handle(req, res)
    ops[`target${count}`] = () => map.get(serverTarget(url)?.name ?? '')
    // The first call checks the stub saw the path the server's endpoint has.
    void router.handle(req, res)
    if (sink.path !== '/mcp') throw new Error(`routing bench: the router sent ${String(sink.path)}, expected /mcp`)
  }
  const own = new Set(['x-api-key'])
  ops.headersNone = () => upstreamRequestHeaders(RAW_HEADERS, PARSED_HEADERS, null)
  ops.headersOne = () => upstreamRequestHeaders(RAW_HEADERS, PARSED_HEADERS, own)
  const samples: Record<string, number[]> = {}
  for (const name in ops) {
    samples[name] = []
    nsPerCall(ops[name], roundMs) // warm-up, so the first round is not the JIT's
  }
  for (let round = 0; round < rounds; round++) for (const name in ops) samples[name].push(nsPerCall(ops[name], roundMs))
  const ns = (name: string): number => median(samples[name])
  const rows: BenchRow[] = [{ label: 'dispatch, upstream: (gateway called directly)', note: `${ns('direct').toFixed(1)} ns per request` }]
  for (const count of COUNTS) {
    rows.push({
      label: `dispatch, Router with ${count} server${count === 1 ? '' : 's'}`,
      note: `${ns(`router${count}`).toFixed(1)} ns per request: routing adds ${(ns(`router${count}`) - ns('direct')).toFixed(1)} ns (target < 1,000 ns)`,
    })
    rows.push({
      label: `serverTarget() + Map lookup, ${count} server${count === 1 ? '' : 's'}`,
      note: `${ns(`target${count}`).toFixed(1)} ns per call`,
    })
  }
  rows.push({
    label: 'upstream request headers, server without headers',
    note: `${ns('headersNone').toFixed(0)} ns per request (with one configured header: ${ns('headersOne').toFixed(0)} ns)`,
  })
  rows.push({ label: 'in-process figures', note: `CPU time, medians of ${rounds} interleaved rounds of ${roundMs} ms per figure` })
  return rows
}

export const sections: BenchSection[] = [
  {
    name: 'routing',
    budgetSeconds: 35,
    async run(ctx) {
      ctx.progress('routing: in process first, before any server shares this thread')
      const micro = microRows(ctx)
      return [...(await httpRows(ctx)), ...micro]
    },
  },
]
