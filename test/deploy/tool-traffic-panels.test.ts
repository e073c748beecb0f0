import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { AuditMetrics, CALL_OUTCOMES } from '../../src/audit/metrics'
import { asPromql, metricNames, promqlErrors } from './promql'

/**
 * The "Calls by tool" row of the shipped dashboard. deploy-files.test.ts checks that every query parses
 * and names a metric a real gateway exports; this checks that these panels group and filter by labels
 * those metrics have, with values they take, so a renamed label or outcome does not leave a panel empty.
 */
interface Panel {
  readonly type: string
  readonly title: string
  readonly gridPos: { h: number; w: number; x: number; y: number }
  readonly targets?: Array<{ expr: string }>
}

const panels = (JSON.parse(readFileSync(join(__dirname, '..', '..', 'deploy', 'grafana', 'wardline.json'), 'utf8')) as { panels: Panel[] })
  .panels
const TITLES = ['Calls per second by tool', 'Upstream latency p99 by tool', 'Failed share of calls by tool', 'Forwarded calls by outcome']

function exprsOf(title: string): string[] {
  const panel = panels.find((p) => p.title === title)
  expect(panel).toBeDefined()
  return (panel?.targets ?? []).map((t) => t.expr)
}

test('the row holds the four panels, below every other panel', () => {
  const row = panels.find((p) => p.type === 'row' && p.title === 'Calls by tool')
  expect(row).toBeDefined()
  for (const title of TITLES) {
    const panel = panels.find((p) => p.title === title)
    expect(panel?.gridPos.y).toBeGreaterThan(row?.gridPos.y ?? Infinity)
  }
})

test('each query parses and reads only the forwarded-call metrics, by the labels they have', async () => {
  const metrics = new AuditMetrics()
  metrics.nameLabels({ tenants: [], tools: ['search'] })
  metrics.countForwardedCall('search', 0, 0.1)
  const text = await metrics.registry.metrics()
  const labelsOf = (name: string): Set<string> => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{`)) ?? ''
    return new Set([...line.matchAll(/(\w+)="/g)].map((m) => m[1]))
  }
  for (const title of TITLES) {
    for (const expr of exprsOf(title)) {
      expect(promqlErrors(asPromql(expr))).toEqual([])
      for (const name of metricNames(asPromql(expr))) {
        expect(['wardline_forwarded_calls_total', 'wardline_forwarded_call_duration_seconds_bucket']).toContain(name)
        const labels = labelsOf(name)
        for (const m of expr.matchAll(/by \(([^)]*)\)/g)) {
          for (const label of m[1].split(',').map((l) => l.trim())) expect(labels).toContain(label)
        }
      }
      // Every outcome a matcher names is one the counter exports.
      for (const m of expr.matchAll(/outcome=~?"([^"]*)"/g)) {
        for (const outcome of m[1].split('|')) expect(CALL_OUTCOMES).toContain(outcome)
      }
    }
  }
})

test('per-tool rate, p99 latency by tool from the histogram, and the failed share over the same calls', () => {
  expect(exprsOf('Calls per second by tool')).toEqual([expect.stringMatching(/^sum by \(tool\) \(rate\(wardline_forwarded_calls_total\{/)])
  const [p99] = exprsOf('Upstream latency p99 by tool')
  expect(p99).toMatch(/^histogram_quantile\(0\.99, sum by \(tool, le\) \(rate\(wardline_forwarded_call_duration_seconds_bucket\{/)
  const [share] = exprsOf('Failed share of calls by tool')
  const [failed, all] = share.split(' / ')
  expect(failed).toContain('outcome=~"http_error|upstream_error"')
  expect(all).not.toContain('outcome')
  expect(exprsOf('Forwarded calls by outcome')).toEqual([expect.stringMatching(/^sum by \(outcome\) /)])
})
