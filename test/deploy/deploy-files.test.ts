import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import type { Pool } from 'pg'
import { type Harness, startHarness, tempDir } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { asPromql, exportedNames, metricNames, promqlErrors } from './promql'

/**
 * The shipped dashboard and alert rules are checked against a real gateway's /metrics: a metric
 * renamed in a feature's metrics.ts, or a typo in a query, fails here rather than as an empty panel or an
 * alert that never fires.
 */
const ROOT = join(__dirname, '..', '..')
const DASHBOARD_PATH = join(ROOT, 'deploy', 'grafana', 'wardline.json')
const RULES_PATH = join(ROOT, 'deploy', 'prometheus', 'alerts.yml')

/** Series Prometheus makes itself for every target (never on /metrics). */
const SYNTHETIC = new Set(['up'])

interface Target {
  readonly expr: string
  readonly refId: string
  readonly datasource?: { type?: string; uid?: string }
}
interface Panel {
  readonly type: string
  readonly title: string
  readonly id: number
  readonly gridPos: { h: number; w: number; x: number; y: number }
  readonly datasource?: { type?: string; uid?: string }
  readonly targets?: Target[]
}
interface Dashboard {
  readonly schemaVersion: number
  readonly uid: string
  readonly title: string
  readonly templating: { list: Array<{ name: string; type: string; query: unknown }> }
  readonly panels: Panel[]
}
interface Rule {
  readonly alert?: string
  readonly record?: string
  readonly expr: string
  readonly for?: string
  readonly labels?: Record<string, string>
  readonly annotations?: Record<string, string>
}

function dashboard(): Dashboard {
  return JSON.parse(readFileSync(DASHBOARD_PATH, 'utf8')) as Dashboard
}

function rules(): Rule[] {
  const doc = yaml.load(readFileSync(RULES_PATH, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> }
  return doc.groups.flatMap((g) => g.rules)
}

/** Every query in the dashboard and the rules, as Prometheus will receive it, with where it comes from. */
function everyExpr(): Array<{ where: string; expr: string }> {
  const fromPanels = dashboard().panels.flatMap((p) =>
    (p.targets ?? []).map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: asPromql(t.expr) })),
  )
  const fromVariables = dashboard()
    .templating.list.filter((v) => v.type === 'query')
    .map((v) => {
      const query = typeof v.query === 'string' ? v.query : (v.query as { query: string }).query
      // label_values(<selector>, label) is Grafana's, not PromQL: its selector is.
      const m = /^label_values\((.*),\s*\w+\)$/.exec(query)
      return { where: `variable ${v.name}`, expr: m === null ? query : m[1] }
    })
  const fromRules = rules().map((r) => ({ where: `rule ${r.alert ?? r.record}`, expr: r.expr }))
  return [...fromPanels, ...fromVariables, ...fromRules]
}

/** Prometheus's duration syntax (model.ParseDuration): units in descending order, each at most once. */
const PROM_DURATION = /^(?:0|(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?)$/

describe('the Grafana dashboard', () => {
  test('parses and has what Grafana needs: schema version, a prometheus datasource variable, panels with targets', () => {
    const d = dashboard()
    expect(d.schemaVersion).toBeGreaterThanOrEqual(36)
    expect(d.uid).toBe('wardline')
    const ds = d.templating.list.find((v) => v.name === 'datasource')
    expect(ds).toMatchObject({ type: 'datasource', query: 'prometheus' })
    const panels = d.panels.filter((p) => p.type !== 'row')
    expect(panels.length).toBeGreaterThanOrEqual(12)
    const ids = new Set<number>()
    for (const p of d.panels) {
      expect(ids.has(p.id)).toBe(false)
      ids.add(p.id)
      expect(p.gridPos.x + p.gridPos.w).toBeLessThanOrEqual(24)
    }
    for (const p of panels) {
      expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' })
      expect(p.targets?.length).toBeGreaterThan(0)
      for (const t of p.targets ?? []) {
        expect(typeof t.expr).toBe('string')
        expect(t.refId).toMatch(/^[A-Z]$/)
        expect(t.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' })
      }
    }
  })

  test('has the panels operators look for', () => {
    const titles = dashboard().panels.map((p) => p.title)
    for (const wanted of [
      'Requests by decision',
      'Latency p50 / p95 / p99',
      'Throttles and denies by tenant',
      'Throttles and denies by tool',
      'Fail-opens and degraded checks',
      'Budget store round trips per check',
      'Audit queue',
      'Spill backlog',
      'Audit drops and backpressure',
      'Upstream errors by kind',
      'Readiness',
    ]) {
      expect(titles).toContain(wanted)
    }
    const latency = dashboard().panels.find((p) => p.title === 'Latency p50 / p95 / p99')
    expect(latency?.targets?.map((t) => /histogram_quantile\(([\d.]+),/.exec(t.expr)?.[1])).toEqual(['0.5', '0.95', '0.99'])
  })
})

describe('the Prometheus alert rules', () => {
  test("parse as YAML with Prometheus's rule-file structure and valid durations", () => {
    const doc = yaml.load(readFileSync(RULES_PATH, 'utf8')) as Record<string, unknown>
    expect(Object.keys(doc)).toEqual(['groups'])
    const groups = doc.groups as Array<Record<string, unknown>>
    expect(groups.length).toBeGreaterThan(0)
    const names = new Set<string>()
    for (const g of groups) {
      expect(typeof g.name).toBe('string')
      expect(names.has(g.name as string)).toBe(false)
      names.add(g.name as string)
      for (const key of Object.keys(g)) expect(['name', 'interval', 'limit', 'rules', 'query_offset', 'labels']).toContain(key)
      const list = g.rules as Array<Record<string, unknown>>
      expect(list.length).toBeGreaterThan(0)
      for (const r of list) {
        for (const key of Object.keys(r)) expect(['alert', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations']).toContain(key)
        expect(typeof r.alert).toBe('string')
        expect(r.alert).toMatch(/^[A-Za-z_][A-Za-z0-9_]*$/)
        expect(typeof r.expr).toBe('string')
        expect(r.for).toMatch(PROM_DURATION)
        const labels = r.labels as Record<string, unknown>
        expect(['critical', 'warning']).toContain(labels.severity)
        for (const [k, v] of Object.entries(labels)) {
          expect(k).toMatch(/^[A-Za-z_][A-Za-z0-9_]*$/)
          expect(typeof v).toBe('string')
        }
        const annotations = r.annotations as Record<string, unknown>
        expect(typeof annotations.summary).toBe('string')
        expect(typeof annotations.description).toBe('string')
      }
    }
  })

  test('cover what the issue asks for', () => {
    const byName = new Map(rules().map((r) => [r.alert, r.expr]))
    expect(byName.get('WardlineBudgetFailOpen')).toContain('wardline_budget_fail_open_total')
    expect(byName.get('WardlineBudgetDegraded')).toContain('wardline_budget_degraded_total')
    expect(byName.get('WardlineAuditSpillPending')).toContain('wardline_audit_spill_bytes')
    expect(byName.get('WardlineAuditDropped')).toContain('wardline_audit_dropped_total')
    expect(byName.get('WardlineAuditBackpressure')).toContain('wardline_audit_backpressure_total')
    expect(byName.get('WardlineUpstreamUnreachable')).toContain('wardline_upstream_errors_total')
    expect(byName.get('WardlineNotReady')).toContain('wardline_ready')
    expect(byName.get('WardlineUpstreamDown')).toContain('wardline_upstream_up')
    expect(byName.get('WardlineTargetDown')).toContain('up')
  })
})

test('every query parses as PromQL (and the checker itself catches a broken one)', () => {
  expect(promqlErrors('sum(rate(wardline_requests_total[5m])')).not.toEqual([])
  expect(promqlErrors('rate(wardline_requests_total[$__rate_interval])')).not.toEqual([])
  expect(promqlErrors('wardline_requests_total{decision=}')).not.toEqual([])
  const broken = everyExpr()
    .map(({ where, expr }) => ({ where, errors: promqlErrors(expr) }))
    .filter((e) => e.errors.length > 0)
  expect(broken).toEqual([])
})

describe('every metric a query names is on a real gateway /metrics', () => {
  let db: TestDatabase
  let pool: Pool
  let memory: Harness
  let postgres: Harness
  beforeAll(async () => {
    ;({ db, pool } = await openTestDatabase(2))
    memory = await startHarness({ mode: 'stateless-json', config: { features: { budget_enforcement: true } } })
    postgres = await startHarness({
      mode: 'stateless-json',
      config: {
        features: { budget_enforcement: true, postgres_storage: true },
        postgres: { dsn: db.url, max_connections: 4 },
        audit: { output: join(tempDir(), 'audit.jsonl'), spill_file: join(tempDir(), 'spill.jsonl') },
      },
    })
  })
  afterAll(async () => {
    await memory?.close()
    await postgres?.close()
    await closeTestDatabase({ db, pool })
  })

  test.each([
    ['in memory', () => memory],
    ['with Postgres storage', () => postgres],
  ])('%s', async (_what, gateway) => {
    const text = await (await fetch(`${gateway().url}/metrics`)).text()
    const exported = exportedNames(text)
    // The check is not vacuous: families without samples yet still count, and made-up names do not.
    expect(exported.has('wardline_request_duration_seconds_bucket')).toBe(true)
    expect(exported.has('wardline_refusals_by_tool_total')).toBe(true)
    expect(exported.has('wardline_requests')).toBe(false)
    const missing: string[] = []
    let checked = 0
    for (const { where, expr } of everyExpr()) {
      const names = metricNames(expr)
      expect(names.length).toBeGreaterThan(0)
      for (const name of names) {
        checked++
        if (!SYNTHETIC.has(name) && !exported.has(name)) missing.push(`${where}: ${name}`)
      }
    }
    expect(checked).toBeGreaterThan(30)
    expect(missing).toEqual([])
  })

  test('the Postgres gateway reports a spill backlog series and the queue limit for its sinks', async () => {
    const text = await (await fetch(`${postgres.url}/metrics`)).text()
    expect(text).toContain('wardline_audit_spill_bytes{sink="postgres"} 0')
    expect(text).toMatch(/^wardline_audit_queue_limit_entries\{sink="postgres"\} 100000$/m)
    expect(text).toMatch(/^wardline_ready 1$/m)
  })
})
