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
  const output = promtoolOutput(promtool, scrapes, rulesFile)
  const fired = new Map<string, number[]>()
  for (const [name, minute] of firedAt(output)) {
    const list = fired.get(name) ?? []
    list.push(minute)
    fired.set(name, list)
  }
  for (const list of fired.values()) list.sort((a, b) => a - b)
  return fired
}

/** `alertname: X, time: 6m, exp:[], got:[0: …]` blocks of promtool's output: each alert that fired, at which minute, with its text. */
function* firedAt(output: string): Generator<[name: string, minute: number, got: string]> {
  const heads = [...output.matchAll(/alertname: (\w+), time: (?:(\d+)h)?(?:(\d+)m)?(?:\d+s)?, \s*exp:\[\], \s*got:\[\s*0:/g)]
  for (let i = 0; i < heads.length; i++) {
    const m = heads[i]
    const end = i + 1 < heads.length ? heads[i + 1].index : output.length
    yield [m[1], Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0), output.slice(m.index, end)]
  }
}

/**
 * firingAlerts by server: alertname → `<server>@<minute>` for each alert that fired (`-` for an alert
 * without a server label), sorted; so a test sees which server an alert named, not only that it fired.
 */
export function firingAlertsByServer(
  promtool: string,
  scrapes: readonly (Map<string, number> | null)[],
  rulesFile = ALERTS_FILE,
): Map<string, string[]> {
  const output = promtoolOutput(promtool, scrapes, rulesFile)
  const fired = new Map<string, string[]>()
  for (const [name, minute, got] of firedAt(output)) {
    const list = fired.get(name) ?? []
    for (const labels of got.matchAll(/Labels:\{([^}]*)\}/g)) {
      const server = /\bserver="([^"]*)"/.exec(labels[1])?.[1] ?? '-'
      list.push(`${server}@${minute}`)
    }
    fired.set(name, list)
  }
  for (const list of fired.values()) list.sort((a, b) => Number(a.split('@')[1]) - Number(b.split('@')[1]) || a.localeCompare(b))
  return fired
}

/** promtool's report on alerts.yml over the scrapes, every alert expected never to fire (see firingAlerts). */
function promtoolOutput(promtool: string, scrapes: readonly (Map<string, number> | null)[], rulesFile: string): string {
  const keys = new Set<string>()
  for (const s of scrapes) for (const k of s?.keys() ?? []) keys.add(k)
  const target = 'job="wardline",instance="r1"'
  const series = [...keys].map((k) => {
    const brace = k.indexOf('{')
    const labels = k.slice(brace + 1, -1)
    return {
      series: `${k.slice(0, brace)}{${labels === '' ? target : `${labels},${target}`}}`,
      // A series that leaves a scrape still answered is marked stale, as Prometheus marks it: it ends
      // there, rather than lingering for the 5 minutes a missed sample would.
      values: scrapes
        .map((s, i) => (s?.has(k) === true ? String(s.get(k)) : s !== null && i > 0 && scrapes[i - 1]?.has(k) === true ? 'stale' : '_'))
        .join(' '),
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
  return output
}
