/**
 * `npm run bench`: the core figure (bench/speed.ts: the gateway with every stage on against a bare Node
 * forwarder, CPU per request and latency at a fixed rate), then
 * every scenario another area registered, each bounded in time so the whole run stays near two
 * minutes (TOTAL_BUDGET_SECONDS). Rounds are interleaved A/B/A/B and medians reported, because the machine is shared and noisy.
 *
 * Adding a scenario: export `sections: BenchSection[]` (bench/load.ts) from one of the files in
 * AREA_FILES. run.ts loads the ones that exist and skips the rest.
 *
 * Environment: BENCH_QUICK=1 shortens every round (smoke runs); BENCH_ONLY=core,budget runs just those.
 */
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { type BenchContext, type BenchRow, type BenchSection, formatRow } from './load'
import { core } from './speed'

/** Files other areas own; each may export `sections`. Loaded only when compiled and present. */
const AREA_FILES = ['auth', 'budget', 'policy', 'postgres', 'attack', 'lists', 'routing']
/**
 * The whole run stays near two minutes; a section that could pass this (elapsed + its budget) is
 * skipped. 125, not 116: issue 14's Postgres figures (spread keys, the spike, round trips, the restart
 * drills) added ~13 s to the postgres section. The last sections (attack, lists-http, routing) are
 * skipped in a full run: run them with BENCH_ONLY.
 */
const TOTAL_BUDGET_SECONDS = 125

const quick = process.env.BENCH_QUICK === '1'
const context: BenchContext = {
  roundMs: quick ? 500 : 1_000,
  rounds: quick ? 2 : 5,
  concurrency: 32,
  progress: (line) => process.stderr.write(`  … ${line}\n`),
}

function loadAreaSections(): BenchSection[] {
  const out: BenchSection[] = []
  for (const name of AREA_FILES) {
    const file = join(__dirname, `${name}.js`)
    if (!existsSync(file)) continue
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a path known at run time; missing areas are skipped
    const mod = require(file) as { sections?: BenchSection[] }
    if (Array.isArray(mod.sections)) out.push(...mod.sections)
    else process.stderr.write(`bench/${name}.js exports no sections: skipped\n`)
  }
  return out
}

async function withDeadline(section: BenchSection, ctx: BenchContext): Promise<BenchRow[]> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<BenchRow[]>((resolve) => {
    timer = setTimeout(
      () => resolve([{ label: section.name, note: `did not finish within ${section.budgetSeconds} s: abandoned` }]),
      section.budgetSeconds * 1000,
    )
  })
  try {
    return await Promise.race([section.run(ctx), late])
  } catch (err) {
    return [{ label: section.name, note: `failed: ${(err as Error).message}` }]
  } finally {
    clearTimeout(timer)
  }
}

async function main(): Promise<void> {
  const only = process.env.BENCH_ONLY?.split(',')
    .map((s) => s.trim())
    .filter(Boolean)
  const sections = [core, ...loadAreaSections()].filter((s) => !only || only.includes(s.name))
  const started = performance.now()
  process.stdout.write(
    `wardline bench: node ${process.version}, medians of ${context.rounds} interleaved rounds of ${context.roundMs} ms, ${context.concurrency} in flight\n`,
  )
  for (const section of sections) {
    const elapsed = (performance.now() - started) / 1000
    if (elapsed + section.budgetSeconds > TOTAL_BUDGET_SECONDS) {
      process.stdout.write(`\n[${section.name}] skipped: ${section.budgetSeconds} s would pass the ${TOTAL_BUDGET_SECONDS} s total\n`)
      continue
    }
    process.stdout.write(`\n[${section.name}]\n`)
    for (const row of await withDeadline(section, context)) process.stdout.write(`${formatRow(row)}\n`)
  }
  process.stdout.write(`\ntotal ${((performance.now() - started) / 1000).toFixed(1)} s\n`)
}

main().then(
  // An abandoned section may still hold sockets or workers: end the process rather than wait on them.
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`)
    process.exit(1)
  },
)
