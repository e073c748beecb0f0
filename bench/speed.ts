/**
 * The core figure (issue 13): tools/call through the gateway with every stage on (JWT with its token
 * cache, budget with tool + tenant + identity buckets, policy, JSONL audit) against the floor of a
 * Node proxy (bench/bare-forwarder.ts), in one run. Each proxy and the upstream run in child processes
 * of their own, pinned to one core while the load generator (this process) is pinned to the other
 * when the machine has two and taskset exists, so each round can be charged its proxy's CPU time,
 * heap allocation and GC pauses: CPU µs per request is far steadier than req/s on a shared machine.
 *
 * Two loads: closed (`concurrency` requests always in flight, rounds interleaved, medians), and a fixed
 * 1,000 req/s whose latency is what most deployments see.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { join } from 'node:path'
import { benchToken, JWT_SECRET } from './auth'
import { HUGE } from './budget'
import { TOOL_CALL_BODY, benchHeaders } from './fixtures'
import {
  type BenchContext,
  type BenchRow,
  type BenchSection,
  type LoadResult,
  interleave,
  median,
  runFixedRate,
  runLoad,
  summarize,
} from './load'
import type { ProcessSample } from './server-process'
import type { ServerJob } from './servers'

/** Connections in flight for the closed load, as the profile was measured. */
const CONNECTIONS = 50
const FIXED_RATE = 1_000
/** A p99 of a few thousand samples swings with one hiccup of either process: the median of three rounds is steadier. */
const PACED_ROUNDS = 3
/** Before each round, so connections are open; before the first, longer, so the JIT has compiled the hot path. */
const WARMUP_MS = 300
const FIRST_WARMUP_MS = 1_500

/** Every stage on, as an operator's production file would have them (limits too high to refuse). */
export function everyStageOn(): Record<string, unknown> {
  return {
    auth: { mode: 'jwt', jwt: { secret: JWT_SECRET, cache_entries: 10_000 } },
    budget: {
      requests_per_window: HUGE,
      window_seconds: 60,
      tenants: { acme: { requests_per_window: HUGE, window_seconds: 60 } },
      tools: { echo: { requests_per_window: HUGE, window_seconds: 60 } },
    },
    policy: {
      default: 'allow',
      rules: [
        { identity: '*', tenant: 'guest', tool: 'expensive_tool', effect: 'deny' },
        { identity: 'intern-*', method: 'resources/*', tool: '*', effect: 'deny' },
      ],
    },
  }
}

export interface ProcessServer {
  readonly url: string
  sample(): Promise<ProcessSample>
  close(): Promise<void>
}

/** Which cores the servers and the load generator get; null when the machine cannot separate them. */
export interface Pinning {
  readonly servers: string
  readonly load: string
  readonly all: string
}

/**
 * The first two CPUs this process may run on (its affinity list as taskset reports it, so a container's
 * cpuset is respected), or null without taskset or a second CPU. `all` restores the list afterwards.
 */
export function pinning(): Pinning | null {
  let all: string
  try {
    const out = execFileSync('taskset', ['-p', '-c', String(process.pid)], { encoding: 'utf8' })
    all = out.slice(out.lastIndexOf(':') + 1).trim()
  } catch {
    return null
  }
  const cpus = expandCpuList(all)
  return cpus.length < 2 ? null : { load: String(cpus[0]), servers: String(cpus[1]), all }
}

/** `0-2,5` → [0, 1, 2, 5] */
function expandCpuList(list: string): number[] {
  const out: number[] = []
  for (const part of list.split(',')) {
    const [from, to] = part.split('-').map(Number)
    if (!Number.isInteger(from)) continue
    for (let cpu = from; cpu <= (Number.isInteger(to) ? to : from); cpu++) out.push(cpu)
  }
  return out
}

/** Every thread of this process onto `cores` (taskset -a: the threads of the pool and of workers too). */
export function pinSelf(cores: string): void {
  execFileSync('taskset', ['-a', '-p', '-c', cores, String(process.pid)], { stdio: 'ignore' })
}

/** `dir`: where server-process.js is (default this build's; BENCH_AGAINST names another's). */
export function startProcessServer(job: ServerJob, cores: string | null, dir = __dirname): Promise<ProcessServer> {
  const file = join(dir, 'server-process.js')
  const args = [file, JSON.stringify(job)]
  const child: ChildProcess =
    cores === null
      ? spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
      : spawn('taskset', ['-c', cores, process.execPath, ...args], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const next = <T>(pick: (message: Record<string, unknown>) => T | undefined): Promise<T> =>
    new Promise((resolve, reject) => {
      const onMessage = (message: Record<string, unknown>): void => {
        if (typeof message.error === 'string') {
          cleanup()
          reject(new Error(`bench ${job.kind} process: ${message.error}`))
          return
        }
        const value = pick(message)
        if (value === undefined) return
        cleanup()
        resolve(value)
      }
      const onExit = (code: number | null): void => {
        cleanup()
        reject(new Error(`bench ${job.kind} process exited (${code})`))
      }
      const cleanup = (): void => {
        child.off('message', onMessage)
        child.off('exit', onExit)
      }
      child.on('message', onMessage)
      child.on('exit', onExit)
    })
  return next((m) => (typeof m.url === 'string' ? m.url : undefined)).then((url) => ({
    url,
    sample: () => {
      const answer = next((m) => m.sample as ProcessSample | undefined)
      child.send('sample')
      return answer
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.send('stop')
        // A server that does not stop in time is killed: the bench must end.
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref()
      }),
  }))
}

/** One round's figures for one proxy: the load's, plus its process's costs per response. */
export interface Round {
  readonly load: LoadResult
  readonly cpuUs: number
  readonly allocatedBytes: number
  readonly gcUs: number
}

export async function measuredRound(
  server: ProcessServer,
  load: () => Promise<LoadResult>,
  warmup: () => Promise<LoadResult>,
): Promise<Round> {
  await warmup()
  const before = await server.sample()
  const result = await load()
  const after = await server.sample()
  const n = Math.max(1, result.requests)
  return {
    load: result,
    cpuUs: (after.cpuUs - before.cpuUs) / n,
    allocatedBytes: (after.allocatedBytes - before.allocatedBytes) / n,
    gcUs: (after.gcPauseUs - before.gcPauseUs) / n,
  }
}

export interface Summary {
  readonly load: LoadResult
  readonly cpuUs: number
  readonly allocatedBytes: number
  readonly gcUs: number
  /** Lowest and highest CPU µs per request over the rounds. */
  readonly cpuSpread: readonly [number, number]
}

export function summarizeRounds(rounds: readonly Round[]): Summary {
  const cpu = rounds.map((r) => r.cpuUs)
  return {
    load: summarize(rounds.map((r) => r.load)),
    cpuUs: median(cpu),
    allocatedBytes: median(rounds.map((r) => r.allocatedBytes)),
    gcUs: median(rounds.map((r) => r.gcUs)),
    cpuSpread: [Math.min(...cpu), Math.max(...cpu)],
  }
}

export function signed(ms: number): string {
  return `${ms < 0 ? '−' : '+'}${Math.abs(ms).toFixed(2)}`
}

export function costs(s: Summary): string {
  return (
    `${s.cpuUs.toFixed(1)} µs CPU/req (${s.cpuSpread[0].toFixed(1)}–${s.cpuSpread[1].toFixed(1)}), ` +
    `${(s.allocatedBytes / 1024).toFixed(1)} KiB alloc/req, ${s.gcUs.toFixed(1)} µs GC/req`
  )
}

/**
 * BENCH_AGAINST=<dir>: also runs the gateway built in another checkout (its dist/bench, which must hold
 * server-process.js) as a third target, interleaved with the two: a simultaneous A/B of a change
 * against the commit before it.
 */
const AGAINST = process.env.BENCH_AGAINST

export const core: BenchSection = {
  name: 'core',
  budgetSeconds: AGAINST === undefined ? 40 : 56,
  async run(ctx: BenchContext): Promise<BenchRow[]> {
    const pins = pinning()
    const cores = pins?.servers ?? null
    const token = await benchToken()
    const headers = { ...benchHeaders(), authorization: `Bearer ${token}` }
    const upstream = await startProcessServer({ kind: 'upstream' }, cores)
    const servers: ProcessServer[] = [upstream]
    if (pins !== null) pinSelf(pins.load)
    try {
      const targets: Record<string, ProcessServer> = {}
      const start = async (name: string, job: ServerJob, dir?: string): Promise<void> => {
        const server = await startProcessServer(job, cores, dir)
        servers.push(server)
        targets[name] = server
      }
      await start('forwarder', { kind: 'forwarder', upstreamUrl: upstream.url })
      await start('gateway', { kind: 'gateway', upstreamUrl: upstream.url, tree: everyStageOn() })
      if (AGAINST !== undefined) await start('against', { kind: 'gateway', upstreamUrl: upstream.url, tree: everyStageOn() }, AGAINST)
      const names = Object.keys(targets)
      // One scenario per target, for load.ts interleave.
      const perTarget = <T>(run: (name: string) => Promise<T>): Record<string, () => Promise<T>> =>
        Object.fromEntries(names.map((name) => [name, () => run(name)]))
      const closed = (name: string, durationMs: number) => () =>
        runLoad({ url: `${targets[name].url}/mcp`, method: 'POST', headers, body: TOOL_CALL_BODY, concurrency: CONNECTIONS, durationMs })

      ctx.progress(
        `core: ${ctx.rounds} rounds of ${ctx.roundMs} ms, ${names.join(', ')} (every stage on), ${CONNECTIONS} connections; ` +
          (pins === null ? 'no CPU pinning on this machine' : `load on CPU ${pins.load}, servers on CPU ${pins.servers}`),
      )
      for (const name of names) await closed(name, FIRST_WARMUP_MS)()
      const rounds = await interleave(
        ctx.rounds,
        perTarget((name) => measuredRound(targets[name], closed(name, ctx.roundMs), closed(name, WARMUP_MS))),
      )
      const summary: Record<string, Summary> = {}
      for (const name of names) summary[name] = summarizeRounds(rounds[name])

      ctx.progress(`core: fixed ${FIXED_RATE} req/s, ${PACED_ROUNDS} rounds of ${ctx.roundMs * 2} ms each`)
      const paced = await interleave(
        PACED_ROUNDS,
        perTarget((name) =>
          runFixedRate({
            url: `${targets[name].url}/mcp`,
            headers,
            body: TOOL_CALL_BODY,
            ratePerSec: FIXED_RATE,
            durationMs: ctx.roundMs * 2,
            connections: CONNECTIONS,
          }),
        ),
      )
      const pacedOf = (name: string): LoadResult => summarize(paced[name])
      const rows: BenchRow[] = [
        { label: 'tools/call through the bare forwarder', result: summary.forwarder.load, note: costs(summary.forwarder) },
        { label: 'tools/call through the gateway, all stages', result: summary.gateway.load, note: costs(summary.gateway) },
      ]
      if (AGAINST !== undefined)
        rows.push({ label: 'the same through BENCH_AGAINST', result: summary.against.load, note: costs(summary.against) })
      rows.push(versus('gateway / bare forwarder (the floor)', summary.gateway, summary.forwarder, true))
      if (AGAINST !== undefined) rows.push(versus('gateway / BENCH_AGAINST', summary.gateway, summary.against))
      for (const name of names) rows.push({ label: `fixed ${FIXED_RATE} req/s, ${LABELS[name]}`, result: pacedOf(name) })
      const floor = pacedOf('forwarder')
      const through = pacedOf('gateway')
      rows.push({
        label: `fixed ${FIXED_RATE} req/s, gateway added`,
        note: `p50 ${signed(through.p50Ms - floor.p50Ms)} ms, p99 ${signed(through.p99Ms - floor.p99Ms)} ms (target < 1 ms)`,
      })
      return rows
    } finally {
      if (pins !== null) pinSelf(pins.all)
      await Promise.all(servers.map((s) => s.close()))
    }
  },
}

const LABELS: Record<string, string> = { forwarder: 'bare forwarder', gateway: 'gateway, all stages', against: 'BENCH_AGAINST' }

/** Ratios of a to b; `targets`: the goals against the floor, printed beside them. */
function versus(label: string, a: Summary, b: Summary, targets = false): BenchRow {
  return {
    label,
    note:
      `throughput ×${(a.load.reqPerSec / b.load.reqPerSec).toFixed(2)}${targets ? ' (target ≥ ×0.85)' : ''}, ` +
      `p99 ×${(a.load.p99Ms / b.load.p99Ms).toFixed(2)}${targets ? ' (target ≤ ×1.3)' : ''}, ` +
      `CPU per request ×${(a.cpuUs / b.cpuUs).toFixed(2)} (${signed(a.cpuUs - b.cpuUs)} µs)`,
  }
}
