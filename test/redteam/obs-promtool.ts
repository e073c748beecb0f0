import { execFileSync } from 'node:child_process'
import { accessSync, constants, mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { delimiter, join, resolve } from 'node:path'
import { tmpdir } from 'node:os'
import yaml from 'js-yaml'

/** How to get a promtool, for the messages below. */
export const PROMTOOL_HOW =
  'set PROMTOOL to a promtool binary or put one on PATH (`export PROMTOOL="$(bash .ci/promtool)"` fetches Debian\'s into ~/.cache/wardline)'

/**
 * promtool (Prometheus's own rule evaluator): $PROMTOOL, else the first on PATH. The test suite never
 * fetches or installs it (no npm package ships it): `.ci/promtool` does, and `.ci/run` exports it.
 * `required` says whether its absence must fail the tests rather than skip them: in CI (CI=true, or
 * WARDLINE_REQUIRE_PROMTOOL=1, which `.ci/run` sets) and whenever PROMTOOL is set, a skip would pass
 * without testing anything.
 */
export function findPromtool(env: NodeJS.ProcessEnv = process.env): { path: string | null; required: boolean; why: string } {
  const ci = env.CI !== undefined && env.CI !== '' && env.CI !== 'false' && env.CI !== '0'
  const required = ci || env.WARDLINE_REQUIRE_PROMTOOL === '1' || env.PROMTOOL !== undefined
  if (env.PROMTOOL !== undefined) {
    return executable(env.PROMTOOL)
      ? { path: env.PROMTOOL, required, why: '' }
      : { path: null, required, why: `PROMTOOL=${env.PROMTOOL} is not an executable file` }
  }
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && executable(join(dir, 'promtool'))) return { path: join(dir, 'promtool'), required, why: '' }
  }
  return { path: null, required, why: `no promtool: ${PROMTOOL_HOW}` }
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK)
    return true
  } catch {
    return false
  }
}

export const ALERTS_FILE = resolve(__dirname, '../../deploy/prometheus/alerts.yml')

/** The alert names in alerts.yml. */
export function alertNames(file = ALERTS_FILE): string[] {
  const doc = yaml.load(readFileSync(file, 'utf8')) as { groups: { rules: { alert?: string }[] }[] }
  return doc.groups.flatMap((g) => g.rules.flatMap((r) => (r.alert === undefined ? [] : [r.alert])))
}

/** The samples of one /metrics text: `name{labels}` (as printed) → value. Comments and process/nodejs series left out. */
export function samples(text: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line)
    if (m === null) throw new Error(`unparsed /metrics line: ${line}`)
    if (m[1].startsWith('wardline_process_') || m[1].startsWith('wardline_nodejs_')) continue
    out.set(m[1] + (m[2] ?? '{}'), Number(m[3]))
  }
  return out
}

/**
 * Runs alerts.yml over a timeline of real /metrics scrapes, one a minute (scrape i is at i minutes),
 * as one replica (job="wardline", instance="r1", up 1 while it has a scrape), and returns which
 * alerts fire at each minute: alertname → the minutes it fires at. promtool is asked to expect no
 * alert anywhere, so every alert it reports as unexpected is one that fired.
 */
export function firingAlerts(
  promtool: string,
  scrapes: readonly (Map<string, number> | null)[],
  rulesFile = ALERTS_FILE,
): Map<string, number[]> {
  const keys = new Set<string>()
  for (const s of scrapes) for (const k of s?.keys() ?? []) keys.add(k)
  const target = 'job="wardline",instance="r1"'
  const series = [...keys].map((k) => {
    const brace = k.indexOf('{')
    const labels = k.slice(brace + 1, -1)
    return {
      series: `${k.slice(0, brace)}{${labels === '' ? target : `${labels},${target}`}}`,
      values: scrapes.map((s) => (s?.has(k) === true ? String(s.get(k)) : '_')).join(' '),
    }
  })
  series.push({ series: `up{${target}}`, values: scrapes.map((s) => (s === null ? '0' : '1')).join(' ') })
  const names = alertNames(rulesFile)
  const tests = [
    {
      interval: '1m',
      input_series: series,
      alert_rule_test: scrapes.flatMap((_, minute) => names.map((alertname) => ({ eval_time: `${minute}m`, alertname, exp_alerts: [] }))),
    },
  ]
  const dir = mkdtempSync(join(tmpdir(), 'obs-promtool-'))
  const file = join(dir, 'test.yml')
  writeFileSync(file, yaml.dump({ rule_files: [rulesFile], evaluation_interval: '1m', tests }, { lineWidth: -1 }))
  let output: string
  try {
    output = execFileSync(promtool, ['test', 'rules', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; status?: number }
    output = `${e.stdout ?? ''}${e.stderr ?? ''}`
    if (!output.includes('FAILED:')) throw new Error(`promtool failed (${e.status}): ${output}`, { cause: err })
  }
  const fired = new Map<string, number[]>()
  for (const m of output.matchAll(/alertname: (\w+), time: (?:(\d+)h)?(?:(\d+)m)?(?:\d+s)?, \s*exp:\[\], \s*got:\[\s*0:/g)) {
    const list = fired.get(m[1]) ?? []
    list.push(Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0))
    fired.set(m[1], list)
  }
  for (const list of fired.values()) list.sort((a, b) => a - b)
  return fired
}
