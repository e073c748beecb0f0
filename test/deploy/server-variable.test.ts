import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { AuditMetrics } from '../../src/audit/metrics'
import { metricsRegistry } from '../../src/metrics-registry'
import { UpstreamMetrics } from '../../src/upstream/metrics'
import { metricSamples } from '../helpers/harness'
import { asPromql, metricNames } from './promql'

/**
 * The dashboard's `server` variable: every query on a metric that carries `server` (with `servers:`)
 * filters by it, and no query filters a metric that never has it (its panel would go empty once a
 * server is picked).
 */
interface Dashboard {
  readonly templating: { list: Array<Record<string, unknown>> }
  readonly panels: Array<{ title: string; targets?: Array<{ expr: string; refId: string }> }>
}
const dashboard = JSON.parse(readFileSync(join(__dirname, '..', '..', 'deploy', 'grafana', 'wardline.json'), 'utf8')) as Dashboard

/** The metric names that carry `server` once every per-request series of one server has counted something. */
async function labelledByServer(): Promise<Set<string>> {
  const registry = metricsRegistry()
  const audit = new AuditMetrics(registry)
  const upstream = new UpstreamMetrics(registry)
  audit.nameLabels({ tenants: ['acme'], tools: ['search'] })
  const docs = audit.forServer('docs')
  docs.recordRequest('deny', 0.01)
  docs.countEntry('deny', 'acme', 'search')
  docs.countForwardedCall('search', 0, 0.01)
  upstream.forServer('docs')
  upstream.upstreamProbeListener('docs')({ up: true, status: 200, cause: null, durationSeconds: 0.01, at: Date.now() })
  const text = await registry.metrics()
  const names = new Set<string>()
  for (const line of text.split('\n')) {
    const name = /^(\w+)\{/.exec(line)?.[1]
    if (name !== undefined && metricSamples(text, name).some((s) => s.labels.server === 'docs')) names.add(name)
  }
  return names
}

test('a server variable of label_values(…, server), every server and unlabelled series under All', () => {
  const v = dashboard.templating.list.find((x) => x.name === 'server')
  expect(v).toMatchObject({ type: 'query', includeAll: true, multi: true, allValue: '.*' })
  expect(v?.definition).toMatch(/^label_values\(wardline_requests_total\{job=~"\$job",instance=~"\$instance"\}, server\)$/)
})

test('every query on a metric with the server label filters by $server, and only those', async () => {
  const labelled = await labelledByServer()
  for (const name of [
    'wardline_requests_total',
    'wardline_forwarded_calls_total',
    'wardline_upstream_errors_total',
    'wardline_upstream_up',
  ])
    expect(labelled).toContain(name)
  const problems: string[] = []
  let filtered = 0
  for (const panel of dashboard.panels) {
    for (const t of panel.targets ?? []) {
      const expr = asPromql(t.expr)
      for (const name of metricNames(expr)) {
        // Each selector of `name` in the query, matchers included.
        for (const m of expr.matchAll(new RegExp(`${name}\\{([^}]*)\\}`, 'g'))) {
          const has = m[1].includes('server=~"$server"')
          if (labelled.has(name) && !has) problems.push(`${panel.title} ${t.refId}: ${name} not filtered by server`)
          if (!labelled.has(name) && has) problems.push(`${panel.title} ${t.refId}: ${name} has no server label`)
          if (has) filtered++
        }
      }
    }
  }
  expect(problems).toEqual([])
  expect(filtered).toBeGreaterThan(15)
})
