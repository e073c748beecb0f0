import { randomBytes } from 'node:crypto'
import { dirname } from 'node:path'
import { AuditMetrics, MAX_LABELLED_NAMES, labelValue, labelledNames } from '../../src/audit/metrics'
import type { AuditEntry } from '../../src/audit/entry'
import { startRawUpstream } from '../e2e/raw-upstream'
import { type Harness, MCP_HEADERS, type MetricSampleLine, as, configFrom, metricSamples, startHarness, toolCall } from '../helpers/harness'

async function scrape(h: Harness): Promise<string> {
  return (await fetch(`${h.url}/metrics`)).text()
}

/** Sum of the samples whose labels include `match`. */
function total(list: MetricSampleLine[], match: Record<string, string> = {}): number {
  return list.filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0)
}

/** How many audit entries match: the count a metric must agree with. */
function entries(all: AuditEntry[], match: (e: AuditEntry) => boolean): number {
  return all.filter(match).length
}

const REFUSED = new Set(['deny', 'throttled', 'unauthorized', 'error'])

/** Runs `jobs` with at most `width` at once. */
async function inParallel(jobs: Array<() => Promise<void>>, width: number): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < jobs.length) await jobs[next++]()
    }),
  )
}

async function call(h: Harness, identity: string, tenant: string, tool: string): Promise<number> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity, tenant) },
    body: JSON.stringify(toolCall(tool)),
  })
  await res.arrayBuffer()
  return res.status
}

/** Budget and policy with named tenants and tools; `other` and `none` are real tenant names here, on purpose. */
const CONFIG = {
  features: { budget_enforcement: true },
  budget: {
    requests_per_window: 100000,
    window_seconds: 3600,
    tenants: { acme: { requests_per_window: 100000 }, other: { requests_per_window: 100000 } },
    tools: { search: { requests_per_window: 2, window_seconds: 3600 } },
  },
  policy: {
    default: 'deny',
    rules: [
      { identity: '*', tool: 'echo', effect: 'allow' },
      { identity: '*', tool: 'search', effect: 'allow' },
      { identity: '*', tenant: 'none', tool: 'danger', effect: 'deny' },
      { identity: '*', tenant: 'glob*', tool: 'wild*', effect: 'deny' },
    ],
  },
}

describe('refusals by tenant and tool against an attacker choosing names', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: CONFIG })
  })
  afterAll(() => h.close())

  test('random tool and tenant names make no new series, and every count equals the audit trail', async () => {
    const jobs: Array<() => Promise<void>> = []
    for (let i = 0; i < 600; i++) {
      const tool = `t-${randomBytes(8).toString('hex')}`
      const tenant = i % 3 === 0 ? `x-${randomBytes(6).toString('hex')}` : i % 3 === 1 ? 'acme' : 'other'
      jobs.push(async () => {
        expect(await call(h, `id${i % 50}`, tenant, tool)).toBe(403) // default deny
      })
    }
    // The named ones too: an allowed call, a throttled one (search allows 2), a denied configured tool,
    // a tenant literally named none, and a call refused before any tool was read (no identity).
    jobs.push(async () => void expect(await call(h, 'a', 'acme', 'echo')).toBe(200))
    await inParallel(jobs, 32)
    expect([await call(h, 'a', 'acme', 'search'), await call(h, 'a', 'acme', 'search'), await call(h, 'a', 'acme', 'search')]).toEqual([
      200, 200, 429,
    ])
    expect(await call(h, 'a', 'none', 'danger')).toBe(403)
    const anonymous = await fetch(`${h.url}/mcp`, { method: 'POST', headers: MCP_HEADERS, body: JSON.stringify(toolCall('echo')) })
    expect(anonymous.status).toBe(401)
    await anonymous.arrayBuffer()

    const audit = await h.audit()
    const text = await scrape(h)
    const byTool = metricSamples(text, 'wardline_refusals_by_tool_total')
    const byTenant = metricSamples(text, 'wardline_refusals_by_tenant_total')

    // Bounded: only configured names (echo, search, danger; wild* is a glob), other and none.
    expect(new Set(byTool.map((s) => s.labels.tool))).toEqual(new Set(['other', 'search', 'danger', 'none']))
    // A tenant named other is not the unconfigured rest; glob* names no tenant.
    expect(new Set(byTenant.map((s) => s.labels.tenant))).toEqual(new Set(['other', 'acme', 'configured:other', 'configured:none', 'none']))
    expect(text.length).toBeLessThan(20_000)

    // Every refused entry is counted once in each metric, under the labels its entry says.
    const refused = audit.filter((e) => REFUSED.has(e.decision))
    expect(refused.length).toBe(600 + 1 + 1 + 1)
    for (const decision of ['deny', 'throttled', 'unauthorized']) {
      const inAudit = entries(audit, (e) => e.decision === decision)
      expect(total(byTool, { decision })).toBe(inAudit)
      expect(total(byTenant, { decision })).toBe(inAudit)
      expect(metricSamples(text, 'wardline_audit_entries_total').find((s) => s.labels.decision === decision)?.value).toBe(inAudit)
    }
    expect(total(byTenant, { tenant: 'configured:other' })).toBe(entries(refused, (e) => e.tenant === 'other'))
    expect(total(byTenant, { tenant: 'acme' })).toBe(entries(refused, (e) => e.tenant === 'acme'))
    expect(total(byTenant, { tenant: 'other' })).toBe(entries(refused, (e) => e.tenant.startsWith('x-')))
    expect(total(byTenant, { tenant: 'configured:none' })).toBe(1)
    expect(total(byTenant, { tenant: 'none', decision: 'unauthorized' })).toBe(1)
    expect(total(byTool, { tool: 'search', decision: 'throttled' })).toBe(1)
    expect(total(byTool, { tool: 'danger', decision: 'deny' })).toBe(1)
    expect(total(byTool, { tool: 'other' })).toBe(600)
    expect(total(byTool, { tool: 'none' })).toBe(entries(refused, (e) => e.tool === ''))
    // Allowed calls are not refusals.
    expect(total(byTool, { decision: 'allow' })).toBe(0)
  })

  test('reloads that rename everything keep the label set to the running config, and names kept keep their counts', async () => {
    const tree = (tools: string[]): Record<string, unknown> => ({
      ...h.tree,
      budget: { ...CONFIG.budget, tools: Object.fromEntries(tools.map((t) => [t, { requests_per_window: 100000 }])) },
    })
    const before = total(metricSamples(await scrape(h), 'wardline_refusals_by_tool_total'), { tool: 'search' })
    expect(before).toBeGreaterThan(0)
    for (let round = 0; round < 40; round++) {
      const names = Array.from({ length: 20 }, () => `r-${randomBytes(6).toString('hex')}`)
      h.gateway.reload(configFrom(tree([...names, 'search']), {}, dirname(h.auditFile)))
      // Each round refuses a call of every configured name, so each would be a series of its own.
      await Promise.all(names.map((n) => call(h, 'b', 'acme', n)))
    }
    const text = await scrape(h)
    const tools = new Set(metricSamples(text, 'wardline_refusals_by_tool_total').map((s) => s.labels.tool))
    // The last round's 20 names, search (a policy rule names it), danger, other, none: no earlier round's.
    expect(tools.size).toBeLessThanOrEqual(20 + 4)
    expect(total(metricSamples(text, 'wardline_refusals_by_tool_total'), { tool: 'search' })).toBe(before)
  })
})

describe('10 000 random tool names in ten batches to a dead MCP server', () => {
  let h: Harness
  beforeAll(async () => {
    const dead = await startRawUpstream((_req, res) => void res.end())
    const url = dead.url
    await dead.close() // nothing listens there any more: every forwarded call fails, its entries say error
    h = await startHarness({
      mode: 'stateless-json',
      upstreamUrl: url,
      config: { max_batch_messages: 1000, budget: { tools: { search: { requests_per_window: 5 } } } },
    })
  })
  afterAll(() => h.close())

  test('each element is an error entry under its own tool name, and the labels stay search, other and none', async () => {
    for (let b = 0; b < 10; b++) {
      // One tenant per batch, chosen by the caller too.
      const batch = Array.from({ length: 1000 }, (_, i) => toolCall(i === 0 ? 'search' : `t-${randomBytes(8).toString('hex')}`, {}, i))
      const res = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...as('mallory', `x-${randomBytes(6).toString('hex')}`) },
        body: JSON.stringify(batch),
      })
      expect(res.status).toBe(502)
      await res.arrayBuffer()
    }
    const audit = await h.audit()
    expect(audit.filter((e) => e.decision === 'error').length).toBe(10_000)
    const text = await scrape(h)
    const byTool = metricSamples(text, 'wardline_refusals_by_tool_total')
    expect(byTool.map((s) => [s.labels.tool, s.labels.decision, s.value])).toEqual([
      ['other', 'error', 9990],
      ['search', 'error', 10],
    ])
    const byTenant = metricSamples(text, 'wardline_refusals_by_tenant_total')
    expect(byTenant.map((s) => [s.labels.tenant, s.labels.decision, s.value])).toEqual([['other', 'error', 10_000]])
    expect(metricSamples(text, 'wardline_upstream_errors_total').find((s) => s.labels.kind === 'unreachable')?.value).toBe(10)
    expect(text.length).toBeLessThan(20_000)
  })
})

describe('labelledNames and labelValue', () => {
  test('names come from budget keys and exact policy names, globs never, at most MAX_LABELLED_NAMES each', () => {
    const many = Object.fromEntries(Array.from({ length: MAX_LABELLED_NAMES + 50 }, (_, i) => [`tenant${i}`, { requests_per_window: 5 }]))
    const config = configFrom({
      listen: '127.0.0.1:0',
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'header' },
      audit: { output: 'stdout' },
      budget: { tenants: many, tools: { a: { cost: 2 } } },
      policy: { default: 'allow', rules: [{ identity: '*', tenant: 'ruled', tool: 'b*', effect: 'deny' }] },
    })
    const names = labelledNames(config.budget, config.policy)
    expect(names.tenants.length).toBe(MAX_LABELLED_NAMES)
    expect(names.tenants[0]).toBe('tenant0')
    expect(names.tenants).not.toContain('ruled') // past the cap: it counts as other
    expect(names.tools).toEqual(['a'])
  })

  test('with servers:, a budget.tools key <server>/<tool> labels the tool by its own name; with upstream: a key is kept whole', () => {
    const tree = (extra: Record<string, unknown>) => ({
      listen: '127.0.0.1:0',
      auth: { mode: 'header' },
      audit: { output: 'stdout' },
      ...extra,
    })
    const servers = configFrom(
      tree({
        servers: { docs: { url: 'http://127.0.0.1:3001/mcp' }, tickets: { url: 'http://127.0.0.1:3002/mcp' } },
        budget: { tools: { 'docs/search': { cost: 1 }, 'tickets/search': { cost: 1 }, 'tickets/open': { cost: 1 } } },
      }),
    )
    expect(labelledNames(servers.budget, null).tools).toEqual(['search', 'open'])
    const upstream = configFrom(
      tree({ upstream: 'http://127.0.0.1:3001', budget: { tools: { 'docs/search': { cost: 1 }, plain: { cost: 1 } } } }),
    )
    expect(labelledNames(upstream.budget, null).tools).toEqual(['docs/search', 'plain'])
  })

  test('no configured name can take the value of another or of other/none', () => {
    const names = ['other', 'none', 'configured:other', 'configured:configured:other', 'acme', 'configured:']
    const values = names.map(labelValue)
    expect(new Set(values).size).toBe(names.length)
    expect(values).not.toContain('other')
    expect(values).not.toContain('none')
    expect(values).toEqual([
      'configured:other',
      'configured:none',
      'configured:configured:other',
      'configured:configured:configured:other',
      'acme',
      'configured:configured:',
    ])
  })

  test('counts carry over for names a reload keeps, and a dropped name stops printing', async () => {
    const m = new AuditMetrics()
    m.nameLabels({ tenants: ['a', 'b'], tools: [] })
    m.countEntry('deny', 'a', 't')
    m.countEntry('deny', 'b', 't')
    m.countEntry('deny', 'c', 't')
    m.countEntry('allow', 'a', 't')
    m.nameLabels({ tenants: ['b', 'd'], tools: [] })
    m.countEntry('throttled', 'b', 't')
    m.countEntry('deny', 'a', '') // no longer configured: other
    const byTenant = metricSamples(await m.registry.metrics(), 'wardline_refusals_by_tenant_total')
    expect(byTenant.map((s) => [s.labels.tenant, s.labels.decision, s.value])).toEqual([
      ['other', 'deny', 2],
      ['b', 'deny', 1],
      ['b', 'throttled', 1],
    ])
    const byTool = metricSamples(await m.registry.metrics(), 'wardline_refusals_by_tool_total')
    expect(byTool.map((s) => [s.labels.tool, s.labels.decision, s.value])).toEqual([
      ['none', 'deny', 1],
      ['other', 'deny', 3],
      ['other', 'throttled', 1],
    ])
  })
})
