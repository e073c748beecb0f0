/**
 * A bounded load generator: `concurrency` requests in flight at all times against one origin, for a
 * fixed duration, over one undici Pool (keep-alive, one connection per in-flight request). Returns
 * throughput, latency percentiles and a count per status, and never holds more than `maxSamples`
 * latencies, so a long or fast run cannot grow memory without bound.
 *
 * Other bench files build on this: `runLoad` for one measurement, `interleave` for A/B rounds on a
 * noisy machine, `median` to summarise them, and `BenchSection`/`BenchRow` to plug a scenario into
 * bench/run.ts (export `sections: BenchSection[]` from bench/<area>.ts).
 */
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { Pool, type Dispatcher } from 'undici'

export interface LoadOptions {
  /** Origin plus path, e.g. http://127.0.0.1:8080/mcp (query included if any). */
  readonly url: string
  readonly method?: Dispatcher.HttpMethod
  readonly headers?: Readonly<Record<string, string>>
  /**
   * The headers of the n-th request (from 0, warm-up included), in place of `headers`: a load spread
   * over many callers. In process only: runLoadInWorker cannot send a function to its worker.
   */
  readonly headersFor?: (n: number) => Record<string, string>
  /** Sent unchanged with every request. */
  readonly body?: string | Buffer
  /** Requests in flight at every moment (one connection each). */
  readonly concurrency: number
  readonly durationMs: number
  /** Requests sent before measuring, so connections are open and code is warm. Not counted. */
  readonly warmupMs?: number
  /** Latencies kept for the percentiles; past this, requests are still counted but not sampled. */
  readonly maxSamples?: number
  /** Per-request bound: a request slower than this counts as an error ('timeout') instead of hanging the run. */
  readonly requestTimeoutMs?: number
}

export interface LoadResult {
  /** Completed requests (any status) during the measured window. */
  readonly requests: number
  readonly seconds: number
  readonly reqPerSec: number
  readonly p50Ms: number
  readonly p99Ms: number
  /** Count per HTTP status, plus 'error' for requests that failed without one. */
  readonly statuses: Readonly<Record<string, number>>
}

const DEFAULT_MAX_SAMPLES = 1_000_000

export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const url = new URL(options.url)
  const path = url.pathname + url.search
  const method = options.method ?? (options.body === undefined ? 'GET' : 'POST')
  const body = typeof options.body === 'string' ? Buffer.from(options.body) : options.body
  const timeoutMs = options.requestTimeoutMs ?? 10_000
  const pool = new Pool(url.origin, { connections: options.concurrency, pipelining: 1, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  const request: Dispatcher.RequestOptions = { path, method, headers: options.headers ? { ...options.headers } : undefined, body }

  const maxSamples = options.maxSamples ?? DEFAULT_MAX_SAMPLES
  const samples = new Float64Array(Math.min(maxSamples, 65_536))
  let sampleStore = samples
  let sampled = 0
  const statuses: Record<string, number> = {}
  let requests = 0
  let measuring = false
  let stopAt = 0

  const headersFor = options.headersFor
  let sent = 0
  const one = async (): Promise<void> => {
    const started = performance.now()
    const key = await send(pool, headersFor === undefined ? request : { ...request, headers: headersFor(sent++) })
    if (!measuring) return
    requests++
    statuses[key] = (statuses[key] ?? 0) + 1
    if (sampled < maxSamples) {
      if (sampled === sampleStore.length) {
        const grown = new Float64Array(Math.min(maxSamples, sampleStore.length * 2))
        grown.set(sampleStore)
        sampleStore = grown
      }
      sampleStore[sampled++] = performance.now() - started
    }
  }

  const worker = async (): Promise<void> => {
    while (performance.now() < stopAt) await one()
  }

  try {
    if ((options.warmupMs ?? 0) > 0) {
      stopAt = performance.now() + (options.warmupMs ?? 0)
      await Promise.all(Array.from({ length: options.concurrency }, worker))
    }
    measuring = true
    const start = performance.now()
    stopAt = start + options.durationMs
    await Promise.all(Array.from({ length: options.concurrency }, worker))
    const seconds = (performance.now() - start) / 1000
    const sorted = sampleStore.subarray(0, sampled).sort()
    return {
      requests,
      seconds,
      reqPerSec: requests / seconds,
      p50Ms: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      statuses,
    }
  } finally {
    await pool.destroy()
  }
}

/** Sends one request and reads its answer to the end: its status as a key of `statuses`, or 'error'. */
async function send(pool: Pool, request: Dispatcher.RequestOptions): Promise<string> {
  try {
    const res = await pool.request(request)
    await res.body.dump()
    return String(res.statusCode)
  } catch {
    return 'error'
  }
}

/** `runLoad` on a worker thread of its own (bench/load-worker.ts); a Buffer body is copied to it. */
export function runLoadInWorker(options: LoadOptions): Promise<LoadResult> {
  const worker = new Worker(join(__dirname, 'load-worker.js'), { workerData: options })
  return new Promise((resolve, reject) => {
    worker.once('error', reject)
    worker.once('message', (msg: { result?: LoadResult; error?: string }) => {
      void worker.terminate()
      if (msg.result !== undefined) resolve(msg.result)
      else reject(new Error(msg.error ?? 'load worker failed'))
    })
  })
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
  return sorted[rank]
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN
  const s = [...values].sort((a, b) => a - b)
  const mid = s.length >> 1
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2
}

/**
 * Runs each named scenario once per round, in the same order every round (A, B, A, B…), so slow
 * phases of a shared machine hit every scenario alike. Returns every round's result per name.
 */
export async function interleave<T = LoadResult>(
  rounds: number,
  scenarios: Readonly<Record<string, () => Promise<T>>>,
): Promise<Record<string, T[]>> {
  const out: Record<string, T[]> = {}
  const names = Object.keys(scenarios)
  for (const name of names) out[name] = []
  // The order rotates each round, so no scenario always runs first (after the previous round's last
  // one, on a machine still busy with it): a fixed order biased every ratio the same way.
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(round + i) % names.length]
      out[name].push(await scenarios[name]())
    }
  }
  return out
}

/** The medians of several rounds of one scenario, with statuses summed over the rounds. */
export function summarize(results: readonly LoadResult[]): LoadResult {
  const statuses: Record<string, number> = {}
  let requests = 0
  let seconds = 0
  for (const r of results) {
    requests += r.requests
    seconds += r.seconds
    for (const k in r.statuses) statuses[k] = (statuses[k] ?? 0) + r.statuses[k]
  }
  return {
    requests,
    seconds,
    reqPerSec: median(results.map((r) => r.reqPerSec)),
    p50Ms: median(results.map((r) => r.p50Ms)),
    p99Ms: median(results.map((r) => r.p99Ms)),
    statuses,
  }
}

/** One printed line of the benchmark report. */
export interface BenchRow {
  /** What was measured, e.g. "tools/call through the gateway". */
  readonly label: string
  readonly result?: LoadResult
  /** Free text after the figures: a ratio, an overhead, a caveat. */
  readonly note?: string
}

/**
 * A scenario bench/run.ts runs when its file exports it as `sections`. `run` must finish within
 * `budgetSeconds` (the whole benchmark stays near two minutes: run.ts TOTAL_BUDGET_SECONDS); run.ts passes the deadline it enforces.
 */
export interface BenchSection {
  readonly name: string
  readonly budgetSeconds: number
  run(context: BenchContext): Promise<BenchRow[]>
}

export interface BenchContext {
  /** Measured seconds per round and number of A/B rounds, scaled down when the run is asked to be quick. */
  readonly roundMs: number
  readonly rounds: number
  readonly concurrency: number
  /** Progress lines for the operator (stderr), not part of the report. */
  progress(line: string): void
}

/** Formats a row as fixed-width text: label, req/s, p50, p99, statuses, note. */
export function formatRow(row: BenchRow): string {
  const r = row.result
  const figures =
    r === undefined
      ? ''
      : `${r.reqPerSec.toFixed(0).padStart(8)} req/s  p50 ${r.p50Ms.toFixed(2).padStart(7)} ms  p99 ${r.p99Ms.toFixed(2).padStart(7)} ms  ${formatStatuses(r.statuses)}`
  return `${row.label.padEnd(44)} ${figures}${row.note ? `  ${row.note}` : ''}`.trimEnd()
}

function formatStatuses(statuses: Readonly<Record<string, number>>): string {
  return Object.keys(statuses)
    .sort()
    .map((k) => `${k}×${statuses[k]}`)
    .join(' ')
}

export interface FixedRateOptions {
  readonly url: string
  readonly headers?: Readonly<Record<string, string>>
  readonly body: string
  /** Requests started per second, whatever the answers do (an open loop: a slow answer does not slow the sender). */
  readonly ratePerSec: number
  readonly durationMs: number
  /** Connections the sender may open; a request waits for one when all are busy (and that wait is counted). */
  readonly connections: number
  readonly requestTimeoutMs?: number
}

/**
 * Latency at a fixed arrival rate, the load a real deployment sees more often than a saturating one.
 * Each request's latency runs from the moment it was due, so a stall of the server (or of this sender)
 * is counted against every request it delayed, not hidden by sending fewer.
 */
export async function runFixedRate(options: FixedRateOptions): Promise<LoadResult> {
  const url = new URL(options.url)
  const timeoutMs = options.requestTimeoutMs ?? 10_000
  const pool = new Pool(url.origin, { connections: options.connections, pipelining: 1, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  const request: Dispatcher.RequestOptions = {
    path: url.pathname + url.search,
    method: 'POST',
    headers: options.headers ? { ...options.headers } : undefined,
    body: Buffer.from(options.body),
  }
  const total = Math.max(1, Math.round((options.ratePerSec * options.durationMs) / 1000))
  const intervalMs = 1000 / options.ratePerSec
  const samples = new Float64Array(total)
  const statuses: Record<string, number> = {}
  let done = 0
  const one = async (dueAt: number): Promise<void> => {
    const key = await send(pool, request)
    samples[done++] = performance.now() - dueAt
    statuses[key] = (statuses[key] ?? 0) + 1
  }
  try {
    const inFlight: Promise<void>[] = []
    const start = performance.now()
    let sent = 0
    while (sent < total) {
      const now = performance.now()
      while (sent < total && start + sent * intervalMs <= now) inFlight.push(one(start + sent++ * intervalMs))
      if (sent < total)
        await new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, start + sent * intervalMs - performance.now())))
    }
    await Promise.all(inFlight)
    const seconds = (performance.now() - start) / 1000
    const sorted = samples.subarray(0, done).sort()
    return { requests: done, seconds, reqPerSec: done / seconds, p50Ms: percentile(sorted, 0.5), p99Ms: percentile(sorted, 0.99), statuses }
  } finally {
    await pool.destroy()
  }
}
