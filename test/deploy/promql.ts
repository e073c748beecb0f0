import { parser } from '@prometheus-io/lezer-promql'

/**
 * A Grafana panel query as Prometheus receives it: Grafana replaces its own range variables before
 * sending, and `$__rate_interval` in a range selector is not PromQL until it has. Label matcher
 * values ("$job") are strings either way.
 */
export function asPromql(expr: string): string {
  return expr.replace(/\$__rate_interval|\$__interval|\$__range/g, '5m')
}

/** The text of every error node the PromQL grammar finds in `expr` (empty: it parses). */
export function promqlErrors(expr: string): string[] {
  const errors: string[] = []
  parser.parse(expr).iterate({
    enter(node) {
      if (node.type.isError) errors.push(`at ${node.from}: ${JSON.stringify(expr.slice(Math.max(0, node.from - 10), node.to + 10))}`)
    },
  })
  return errors
}

/**
 * Every metric name `expr` selects: the Identifier of each VectorSelector. A selector by `__name__`
 * cannot be checked against /metrics, so it is reported as such rather than skipped.
 */
export function metricNames(expr: string): string[] {
  const names: string[] = []
  parser.parse(expr).iterate({
    enter(node) {
      if (node.name === 'Identifier' && node.node.parent?.name === 'VectorSelector') names.push(expr.slice(node.from, node.to))
      if (node.name === 'LabelName' && expr.slice(node.from, node.to) === '__name__') names.push('__name__ matcher')
    },
  })
  return names
}

/**
 * The sample names a /metrics text can hold, from its `# TYPE` lines (prom-client prints them for
 * families without samples too): the family name, and for a histogram or summary its _bucket, _sum
 * and _count series.
 */
export function exportedNames(metricsText: string): Set<string> {
  const names = new Set<string>()
  for (const line of metricsText.split('\n')) {
    const m = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (m === null) continue
    const [, name, type] = m
    names.add(name)
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s)
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(name + s)
  }
  return names
}
