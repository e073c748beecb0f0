/**
 * Budget accuracy through a database restart (issue 14 item 4), for bench/postgres.ts: per mode, two
 * gateways (replicas) on a database of their own on one throwaway cluster, one identity whose bucket
 * allows DRILL_LIMIT calls in a window that outlasts the drill, closed-loop load through both. The load
 * runs until half the bucket is used, the cluster is stopped for DRILL_OUTAGE_MS, started again, and
 * the load goes on for DRILL_AFTER_MS. Accuracy is what was admitted (HTTP 200) ÷ the limit: 1.00 is exact; `open` admits
 * every call of the outage; `local` admits what each replica's share of the remainder allows.
 */
import { randomBytes } from 'node:crypto'
import { Client } from 'pg'
import { Pool as HttpPool } from 'undici'
import { type BenchServer, TOOL_CALL_BODY, benchHeaders, startBenchGateway } from './fixtures'
import type { BenchRow } from './load'
import type { ThrowawayPostgres } from './throwaway-postgres'

const DRILL_LIMIT = 1000
const DRILL_OUTAGE_MS = 2000
const DRILL_AFTER_MS = 750
/** Calls in flight, split over the two replicas. */
const DRILL_CALLERS = 16

export type OnStoreError = 'open' | 'local'

/** Two replicas on a database of their own, started ahead of the drill (see `prepareDrill`). */
export interface DrillReplicas {
  readonly mode: OnStoreError
  readonly gateways: readonly BenchServer[]
  close(): Promise<void>
}

/**
 * Starts the two replicas of one drill on a new database of `cluster`. Started well before the drill
 * runs (bench/postgres.ts does it first): a replica learns how many replicas are alive from its own
 * heartbeats (every 5 s), and a drill started within 5 s of the second replica would catch the first
 * one still counting itself alone, which no long-running deployment sees.
 */
export async function prepareDrill(cluster: ThrowawayPostgres, upstreamUrl: string, mode: OnStoreError): Promise<DrillReplicas> {
  const name = `wardline_drill_${mode}_${randomBytes(3).toString('hex')}`
  const admin = new Client({ connectionString: cluster.url })
  admin.on('error', () => undefined)
  await admin.connect()
  try {
    await admin.query(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const u = new URL(cluster.url)
  u.pathname = `/${name}`
  const tree = {
    features: { budget_enforcement: true, postgres_storage: true },
    postgres: { dsn: u.toString(), max_connections: 4 },
    budget: { requests_per_window: DRILL_LIMIT, window_seconds: 600, check_timeout_seconds: 1, on_store_error: mode },
  }
  // One after the other: both would run the migrations otherwise (safe, but the loser waits on the lock).
  const first = await startBenchGateway(upstreamUrl, tree)
  const second = await startBenchGateway(upstreamUrl, tree).catch(async (err: unknown) => {
    await first.close()
    throw err
  })
  return { mode, gateways: [first, second], close: () => Promise.all([first.close(), second.close()]).then(() => undefined) }
}

/** Closed-loop load on one identity through both replicas until `stop()`: admitted (200) and other answers counted. */
class DrillLoad {
  admitted = 0
  throttled = 0
  other = 0
  private running = true
  private readonly pools: HttpPool[]
  private readonly done: Promise<void>

  constructor(gateways: readonly BenchServer[]) {
    this.pools = gateways.map((g) => new HttpPool(g.url, { connections: DRILL_CALLERS, pipelining: 1 }))
    const headers = benchHeaders('drill')
    this.done = Promise.all(
      Array.from({ length: DRILL_CALLERS }, async (_, i) => {
        const pool = this.pools[i % this.pools.length]
        while (this.running) {
          try {
            const res = await pool.request({ path: '/mcp', method: 'POST', headers, body: TOOL_CALL_BODY })
            await res.body.dump()
            if (res.statusCode === 200) this.admitted++
            else if (res.statusCode === 429) this.throttled++
            else this.other++
          } catch {
            this.other++
          }
        }
      }),
    ).then(() => undefined)
  }

  /** Resolves once `admitted` reaches `n` (checked every 5 ms) or `timeoutMs` passed. */
  async until(n: number, timeoutMs: number): Promise<boolean> {
    const end = performance.now() + timeoutMs
    while (this.admitted < n && performance.now() < end) await pause(5)
    return this.admitted >= n
  }

  async stop(): Promise<void> {
    this.running = false
    await this.done
    await Promise.all(this.pools.map((p) => p.destroy()))
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** One sample of a gateway's /metrics text (0 when absent). */
export async function metricValue(gatewayUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? 0 : Number(line.slice(series.length + 1))
}

/**
 * Runs the drill on every prepared pair at once, through one restart of their shared cluster (the same
 * outage for each mode, and one restart instead of one per mode), and returns a row per pair: accuracy,
 * and how the outage's checks were decided. Each pair has its own database, identity and limit.
 */
export async function runDrills(cluster: ThrowawayPostgres, pairs: readonly DrillReplicas[]): Promise<BenchRow[]> {
  const loads = pairs.map((p) => new DrillLoad(p.gateways))
  const before: number[] = []
  const during: number[] = []
  let outageMs: number
  try {
    for (const load of loads) {
      if (!(await load.until(DRILL_LIMIT / 2, 10_000))) throw new Error(`half the limit not admitted within 10 s (${load.admitted})`)
    }
    before.push(...loads.map((l) => l.admitted))
    const down = performance.now()
    await cluster.stop()
    await pause(DRILL_OUTAGE_MS)
    await cluster.start()
    outageMs = performance.now() - down
    during.push(...loads.map((l, i) => l.admitted - before[i]))
    await pause(DRILL_AFTER_MS)
  } finally {
    await Promise.all(loads.map((l) => l.stop()))
  }
  const rows: BenchRow[] = []
  for (let i = 0; i < pairs.length; i++) {
    const { mode, gateways } = pairs[i]
    const load = loads[i]
    const sum = async (series: string): Promise<number> =>
      (await Promise.all(gateways.map((g) => metricValue(g.url, series)))).reduce((a, b) => a + b, 0)
    const fallback =
      mode === 'open'
        ? `${await sum('wardline_budget_fail_open_total')} failed open`
        : `${await sum('wardline_budget_degraded_total')} judged locally`
    const after = load.admitted - before[i] - during[i]
    rows.push({
      label: `restart drill, on_store_error ${mode}: admitted ÷ limit`,
      note:
        `${(load.admitted / DRILL_LIMIT).toFixed(2)} (${load.admitted} of ${DRILL_LIMIT}: ${before[i]} before, ${during[i]} while down, ` +
        `${after} after; ${fallback}; ${load.throttled} throttled, ${load.other} other; 2 replicas, down ${(outageMs / 1000).toFixed(1)} s)`,
    })
  }
  return rows
}
