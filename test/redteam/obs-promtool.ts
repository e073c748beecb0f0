import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { homedir, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import yaml from 'js-yaml'

/**
 * promtool (Prometheus's own rule evaluator): $PROMTOOL, else on PATH, else provisioned as the test
 * suite provisions Postgres when none is reachable: Debian's `prometheus` package, downloaded (never
 * installed: no service, no root needed beyond apt's download) and unpacked once into
 * ~/.cache/wardline/prometheus, then reused. Throws, with what to do, when none can be had: an alert
 * test that skips itself on a machine without promtool would pass without testing anything.
 */
export function findPromtool(): string {
  if (process.env.PROMTOOL !== undefined && existsSync(process.env.PROMTOOL)) return process.env.PROMTOOL
  const which = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' })
  if (which.status === 0 && which.stdout.trim() !== '') return which.stdout.trim()
  const cache = join(homedir(), '.cache', 'wardline', 'prometheus')
  const binary = join(cache, 'usr', 'bin', 'promtool')
  if (existsSync(binary)) return binary
  // Unpacked beside the cache and renamed into place: test files provisioning at once never see half a tree.
  mkdirSync(dirname(cache), { recursive: true })
  const work = mkdtempSync(`${cache}.download-`)
  const download = (): boolean =>
    spawnSync('apt-get', ['download', 'prometheus'], { cwd: work, stdio: 'ignore', timeout: 120_000 }).status === 0
  if (!download()) {
    spawnSync('apt-get', ['update', '-qq'], { stdio: 'ignore', timeout: 120_000 })
    if (!download()) {
      throw new Error('promtool not found: set PROMTOOL, put it on PATH, or let `apt-get download prometheus` work (Debian/Ubuntu)')
    }
  }
  const deb = readdirSync(work).find((f) => f.endsWith('.deb'))
  if (deb === undefined) throw new Error(`apt-get download prometheus left no .deb in ${work}`)
  execFileSync('dpkg', ['-x', join(work, deb), join(work, 'root')])
  try {
    renameSync(join(work, 'root'), cache)
  } catch (err) {
    if (!existsSync(binary)) throw err // another test file put it in place first: theirs is as good
  }
  rmSync(work, { recursive: true, force: true })
  return binary
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
