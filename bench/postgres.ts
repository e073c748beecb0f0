/**
 * The Postgres budget store's allow path next to the in-memory one, in the same run:
 *  - through the gateway over HTTP, one hot identity, with bench/budget.ts's cost-weighted two-window
 *    config (every check locks the same six rows);
 *  - the store alone, in process, 32 checks in flight: spread keys (one identity bucket per check,
 *    cycling over 10 000 identities) and one hot key (three buckets, one window each), with
 *    synchronous_commit off (the default) and on, next to memory; and the hot key with the six
 *    buckets of the HTTP config, synchronous_commit off, to show what the extra rows cost.
 * Needs a Postgres: WARDLINE_BENCH_DATABASE_URL, else WARDLINE_TEST_DATABASE_URL, else
 * postgres@127.0.0.1:5432. A scratch database is created and dropped; without a server the section
 * reports that it was skipped.
 */
import { randomBytes } from 'node:crypto'
import { Client, Pool } from 'pg'
import { MemoryBudgetStore } from '../src/budget/memory-store'
import { PostgresBudgetStore } from '../src/budget/postgres-store'
import type { BucketCharge, BudgetStore } from '../src/budget/store'
import { silentLogger } from '../src/log'
import { migrate } from '../src/postgres/migrate'
import { HUGE, TWO_WINDOWS, echoCharges } from './budget'
import { startBenchGateway, startRawUpstream, toolCallLoad } from './fixtures'
import { type BenchRow, type BenchSection, interleave, median, summarize } from './load'

const ADMIN_URL =
  process.env.WARDLINE_BENCH_DATABASE_URL ?? process.env.WARDLINE_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const BUDGET = TWO_WINDOWS(HUGE)

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

const postgres: BenchSection = {
  name: 'postgres',
  budgetSeconds: 35,
  async run(ctx) {
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
    try {
      const pool = new Pool({ connectionString: dsn, max: 10 })
      pool.on('error', () => undefined)
      await migrate(pool, silentLogger())

      // 1. Through the gateway over HTTP: one hot identity, six buckets per check, 3 units each.
      const upstream = await startRawUpstream()
      const memoryGw = await startBenchGateway(upstream.url, { features: { budget_enforcement: true }, budget: BUDGET })
      const pgGw = await startBenchGateway(upstream.url, {
        features: { budget_enforcement: true, postgres_storage: true },
        postgres: { dsn, max_connections: 10 },
        budget: BUDGET,
      })
      try {
        const load = toolCallLoad(ctx)
        ctx.progress(`postgres: ${ctx.rounds} HTTP rounds of ${ctx.roundMs} ms, memory then postgres store, one hot identity, 6 buckets`)
        const rounds = await interleave(ctx.rounds, { memory: load(memoryGw.url), postgres: load(pgGw.url) })
        const m = summarize(rounds.memory)
        const p = summarize(rounds.postgres)
        rows.push(
          { label: 'tools/call admitted, memory (hot, 6 buckets)', result: m },
          {
            label: 'tools/call admitted, postgres (hot, 6 buckets)',
            result: p,
            note: `×${(p.reqPerSec / m.reqPerSec).toFixed(2)} of memory`,
          },
        )
      } finally {
        await pgGw.close()
        await memoryGw.close()
        await upstream.close()
      }

      // 2. The store alone: spread keys and one hot key, synchronous_commit off and on.
      const ms = Math.max(250, Math.round(ctx.roundMs / 4))
      const storeRounds = Math.min(ctx.rounds, 3)
      let n = 0
      const spread = () => identityOnly(`u${n++ % 10_000}`)
      const hot3 = echoCharges([3600], 1, 'hot')
      const hot6 = echoCharges([60, 86_400], 3, 'hot')
      const memory = new MemoryBudgetStore()
      const off = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
      const on = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, synchronousCommit: true })
      await off.calibrate()
      await on.calibrate()
      ctx.progress(`postgres: store alone, ${storeRounds} rounds of ${ms} ms per case, 32 in flight`)
      const cases: Record<string, () => Promise<{ perSec: number; p50Ms: number }>> = {
        'memory, spread keys': () => storeLoad(memory, spread, 32, ms),
        'postgres, spread keys, sync commit off': () => storeLoad(off, spread, 32, ms),
        'postgres, spread keys, sync commit on': () => storeLoad(on, spread, 32, ms),
        'memory, hot key (3 buckets)': () => storeLoad(memory, () => hot3, 32, ms),
        'postgres, hot key (3 buckets), sync off': () => storeLoad(off, () => hot3, 32, ms),
        'postgres, hot key (3 buckets), sync on': () => storeLoad(on, () => hot3, 32, ms),
        'memory, hot key (6 buckets)': () => storeLoad(memory, () => hot6, 32, ms),
        'postgres, hot key (6 buckets), sync off': () => storeLoad(off, () => hot6, 32, ms),
      }
      const results: Record<string, Array<{ perSec: number; p50Ms: number }>> = {}
      for (let round = 0; round < storeRounds; round++) {
        for (const label in cases) (results[label] ??= []).push(await cases[label]())
      }
      for (const label in results) {
        const perSec = median(results[label].map((r) => r.perSec))
        const p50 = median(results[label].map((r) => r.p50Ms))
        rows.push({ label: `store alone: ${label}`, note: `${perSec.toFixed(0)} checks/s, p50 ${p50.toFixed(2)} ms` })
      }
      await pool.end()
    } finally {
      await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => undefined)
    }
    return rows
  },
}

export const sections: BenchSection[] = [postgres]
