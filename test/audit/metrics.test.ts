import { AuditMetrics, CALL_OUTCOMES, type CallOutcome } from '../../src/audit/metrics'
import { metricSamples } from '../helpers/harness'

// The expected samples below are what prom-client's own Counter and Histogram printed for the same
// calls before the per-request metrics became plain arrays read at scrape time: no sample may change.
// Where in the text each series stands is not compared: a scraper does not read it, and it moves
// whenever metrics are registered in another order.

/** The section of the /metrics text for one metric: its HELP and TYPE lines and its samples. */
async function section(metrics: AuditMetrics, name: string): Promise<string> {
  const text = await metrics.registry.metrics()
  const found = text.split('\n\n').find((s) => s.startsWith(`# HELP ${name} `))
  if (found === undefined) throw new Error(`no metric ${name} in /metrics`)
  return found.trimEnd()
}

/** One sample line as `name{label="value",…} value`, labels in name order, whatever order it printed them in. */
function canonical(line: string): string {
  const name = line.slice(0, line.search(/[{ ]/))
  const [{ labels, value }] = metricSamples(line, name)
  const shown = Object.keys(labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(labels[k])}`)
  return `${name}{${shown.join(',')}} ${value}`
}

/** The HELP and TYPE lines of one metric, then its samples (of a histogram: _bucket, _sum, _count), each canonical and sorted. */
async function samples(metrics: AuditMetrics, name: string): Promise<{ head: string[]; samples: string[] }> {
  const lines = (await section(metrics, name)).split('\n')
  return { head: lines.slice(0, 2), samples: lines.slice(2).map(canonical).sort() }
}

/** What `samples` should find: the HELP and TYPE lines, and these sample lines in any order. */
function expected(head: string[], lines: string[]): { head: string[]; samples: string[] } {
  return { head, samples: lines.map(canonical).sort() }
}

const REQUESTS_HELP = [
  '# HELP wardline_requests_total Proxied HTTP requests, by decision (a batch counts once; see wardline_audit_entries_total)',
  '# TYPE wardline_requests_total counter',
]
const ENTRIES_HELP = [
  '# HELP wardline_audit_entries_total Audit entries recorded, by decision (a forwarded batch writes one per gated element, plus one for the rest)',
  '# TYPE wardline_audit_entries_total counter',
]
const DURATION_HELP = [
  '# HELP wardline_request_duration_seconds Time from request arrival to the end of the response, by decision (one observation per request)',
  '# TYPE wardline_request_duration_seconds histogram',
]

test('counts, buckets, sum and count are the samples they were, le inclusive', async () => {
  const metrics = new AuditMetrics()
  metrics.recordRequest('deny', 0.005) // exactly on a bound: counted in le="0.005"
  metrics.countEntry('deny')
  metrics.recordRequest('allow', 0.001) // exactly on the first bound
  metrics.countEntry('passthrough') // a batch's rest entry, seen before its first allow entry
  metrics.countEntry('allow')
  metrics.countEntry('allow')
  metrics.recordRequest('allow', 31) // above the last bound: only in +Inf, _sum and _count
  metrics.countEntry('allow')
  metrics.recordRequest('deny', 0)
  metrics.countEntry('deny')
  metrics.recordRequest('allow', 0.1)
  metrics.countEntry('allow')
  metrics.recordRequest('allow', 0.2)
  metrics.countEntry('allow')
  metrics.recordRequest('allow', 30) // exactly on the last bound
  metrics.countEntry('allow')

  expect(await samples(metrics, 'wardline_requests_total')).toEqual(
    expected(REQUESTS_HELP, ['wardline_requests_total{decision="deny"} 2', 'wardline_requests_total{decision="allow"} 5']),
  )
  expect(await samples(metrics, 'wardline_audit_entries_total')).toEqual(
    expected(ENTRIES_HELP, [
      'wardline_audit_entries_total{decision="deny"} 2',
      'wardline_audit_entries_total{decision="passthrough"} 1',
      'wardline_audit_entries_total{decision="allow"} 6',
    ]),
  )
  expect(await samples(metrics, 'wardline_request_duration_seconds')).toEqual(
    expected(DURATION_HELP, [
      'wardline_request_duration_seconds_bucket{le="0.001",decision="deny"} 1',
      'wardline_request_duration_seconds_bucket{le="0.0025",decision="deny"} 1',
      'wardline_request_duration_seconds_bucket{le="0.005",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.01",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.025",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.05",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.1",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.25",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.5",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="1",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="2.5",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="5",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="10",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="30",decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="+Inf",decision="deny"} 2',
      'wardline_request_duration_seconds_sum{decision="deny"} 0.005',
      'wardline_request_duration_seconds_count{decision="deny"} 2',
      'wardline_request_duration_seconds_bucket{le="0.001",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.0025",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.005",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.01",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.025",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.05",decision="allow"} 1',
      'wardline_request_duration_seconds_bucket{le="0.1",decision="allow"} 2',
      'wardline_request_duration_seconds_bucket{le="0.25",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="0.5",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="1",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="2.5",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="5",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="10",decision="allow"} 3',
      'wardline_request_duration_seconds_bucket{le="30",decision="allow"} 4',
      'wardline_request_duration_seconds_bucket{le="+Inf",decision="allow"} 5',
      'wardline_request_duration_seconds_sum{decision="allow"} 61.301',
      'wardline_request_duration_seconds_count{decision="allow"} 5',
    ]),
  )
})

test('a decision never seen prints no sample, as before: a fresh registry has only the HELP and TYPE lines', async () => {
  const metrics = new AuditMetrics()
  expect(await samples(metrics, 'wardline_requests_total')).toEqual(expected(REQUESTS_HELP, []))
  expect(await samples(metrics, 'wardline_audit_entries_total')).toEqual(expected(ENTRIES_HELP, []))
  expect(await samples(metrics, 'wardline_request_duration_seconds')).toEqual(expected(DURATION_HELP, []))

  metrics.recordRequest('throttled', 0.002)
  expect(await metrics.registry.metrics()).not.toMatch(/decision="(allow|deny|passthrough|error|unauthorized)"/)
})

test("the registry's JSON holds the same samples as the text, labels merged as prom-client's Histogram did", async () => {
  const metrics = new AuditMetrics()
  metrics.recordRequest('error', 0.004)
  metrics.countEntry('error')
  const json = await metrics.registry.getMetricsAsJSON()
  const duration = json.find((m) => m.name === 'wardline_request_duration_seconds')
  expect(duration).toMatchObject({ type: 'histogram', aggregator: 'sum' })
  expect(duration?.values).toContainEqual(
    expect.objectContaining({ metricName: 'wardline_request_duration_seconds_bucket', labels: { le: 0.005, decision: 'error' }, value: 1 }),
  )
  expect(duration?.values).toContainEqual(
    expect.objectContaining({ metricName: 'wardline_request_duration_seconds_count', labels: { decision: 'error' }, value: 1 }),
  )
  expect(json.find((m) => m.name === 'wardline_audit_entries_total')?.values).toEqual([{ labels: { decision: 'error' }, value: 1 }])
})

describe('forwarded calls by tool', () => {
  const outcome = (o: CallOutcome): number => CALL_OUTCOMES.indexOf(o)
  /** The buckets of one tool, as `le count` pairs from the lowest bound up (+Inf last), wherever the text prints them. */
  async function buckets(metrics: AuditMetrics, tool: string): Promise<string[]> {
    const text = await section(metrics, 'wardline_forwarded_call_duration_seconds')
    return metricSamples(text, 'wardline_forwarded_call_duration_seconds_bucket')
      .filter((s) => s.labels.tool === tool)
      .sort((a, b) => Number(a.labels.le) - Number(b.labels.le))
      .map((s) => `${s.labels.le} ${s.value}`)
  }

  test('counts by outcome and tool, and one observation per call in the request histogram buckets (le inclusive)', async () => {
    const metrics = new AuditMetrics()
    metrics.nameLabels({ tenants: [], tools: ['search', 'other'] })
    metrics.countForwardedCall('search', outcome('ok'), 0.005) // exactly on a bound
    metrics.countForwardedCall('search', outcome('ok'), 0.3)
    metrics.countForwardedCall('search', outcome('upstream_error'), 31) // above the last bound: +Inf only
    metrics.countForwardedCall('other', outcome('ok'), 0.001) // a tool literally named other
    metrics.countForwardedCall('made-up', outcome('client_closed'), 0.02)
    metrics.countForwardedCall('', outcome('http_error'), 0.002)

    // One series per outcome and tool seen: none, other, search, and the configured name other under its prefix.
    expect((await samples(metrics, 'wardline_forwarded_calls_total')).samples).toEqual(
      [
        'wardline_forwarded_calls_total{outcome="http_error",tool="none"} 1',
        'wardline_forwarded_calls_total{outcome="client_closed",tool="other"} 1',
        'wardline_forwarded_calls_total{outcome="ok",tool="search"} 2',
        'wardline_forwarded_calls_total{outcome="upstream_error",tool="search"} 1',
        'wardline_forwarded_calls_total{outcome="ok",tool="configured:other"} 1',
      ]
        .map(canonical)
        .sort(),
    )
    expect(await buckets(metrics, 'search')).toEqual([
      '0.001 0',
      '0.0025 0',
      '0.005 1',
      '0.01 1',
      '0.025 1',
      '0.05 1',
      '0.1 1',
      '0.25 1',
      '0.5 2',
      '1 2',
      '2.5 2',
      '5 2',
      '10 2',
      '30 2',
      '+Inf 3',
    ])
    const text = await section(metrics, 'wardline_forwarded_call_duration_seconds')
    expect(text).toContain('wardline_forwarded_call_duration_seconds_sum{tool="search"} 31.305')
    expect(text).toContain('wardline_forwarded_call_duration_seconds_count{tool="search"} 3')
    expect(text).toContain('wardline_forwarded_call_duration_seconds_count{tool="configured:other"} 1')
    expect(text).toContain('wardline_forwarded_call_duration_seconds_count{tool="other"} 1')
    expect(text).toContain('wardline_forwarded_call_duration_seconds_count{tool="none"} 1')
    expect(text.split('\n').filter((l) => l.includes('_bucket{')).length).toBe(4 * 15)
  })

  test('a reload keeps the counts and observations of names it keeps; a dropped name stops printing and counts as other from then on', async () => {
    const metrics = new AuditMetrics()
    metrics.nameLabels({ tenants: [], tools: ['a', 'b'] })
    metrics.countForwardedCall('a', outcome('ok'), 0.2)
    metrics.countForwardedCall('b', outcome('ok'), 0.2)
    metrics.nameLabels({ tenants: [], tools: ['c', 'a'] })
    metrics.countForwardedCall('a', outcome('ok'), 0.04)
    metrics.countForwardedCall('b', outcome('ok'), 3)
    const text = await metrics.registry.metrics()
    expect(text).toContain('wardline_forwarded_calls_total{outcome="ok",tool="a"} 2')
    expect(text).toContain('wardline_forwarded_calls_total{outcome="ok",tool="other"} 1')
    expect(text).not.toContain('tool="b"')
    expect(text).not.toContain('tool="c"') // configured, never called: no series
    expect(await buckets(metrics, 'a')).toEqual(expect.arrayContaining(['0.05 1', '0.25 2', '+Inf 2']))
    expect(await buckets(metrics, 'other')).toEqual(expect.arrayContaining(['2.5 0', '5 1']))
  })

  test('a fresh registry prints the HELP and TYPE lines of both, so dashboards and rules can name them before the first call', async () => {
    const metrics = new AuditMetrics()
    expect(await section(metrics, 'wardline_forwarded_calls_total')).toMatch(/^# HELP .*\n# TYPE wardline_forwarded_calls_total counter$/)
    expect(await section(metrics, 'wardline_forwarded_call_duration_seconds')).toMatch(
      /^# HELP .*\n# TYPE wardline_forwarded_call_duration_seconds histogram$/,
    )
  })
})
