import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { AuditMetrics } from '../../src/audit/metrics'
import { BudgetMetrics } from '../../src/budget/metrics'
import { metricsRegistry } from '../../src/metrics-registry'
import { DECISIONS } from '../../src/pipeline/exchange'
import { ServerMetrics } from '../../src/server/metrics'
import { UPSTREAM_ERROR_KINDS } from '../../src/upstream/failures'
import { UpstreamMetrics } from '../../src/upstream/metrics'
import { MCP_HEADERS, as, startHarness, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { findPromtool, firingAlerts, firingAlertsByServer, samples } from './obs-promtool'

/**
 * Red team (obs): deploy/prometheus/alerts.yml evaluated by Prometheus's own promtool over timelines
 * of real /metrics text (one scrape a minute), before, during and after each condition. Each alert
 * must fire when its condition holds and stay quiet otherwise.
 *
 * promtool is not an npm package and the suite installs nothing: the tests that run it take it from
 * PROMTOOL or PATH (findPromtool; `.ci/promtool` fetches one), are skipped with a note on a machine
 * without it, and fail in CI, where a skip would pass without testing anything. The last two tests
 * need no promtool.
 */
const found = findPromtool()
const promtool = found.path ?? ''
/** A test that needs promtool: skipped without it, or failed when this run requires it. */
const alertTest: (name: string, fn: () => Promise<void>, timeout?: number) => void =
  found.path !== null
    ? test
    : found.required
      ? (name) =>
          test(name, () => {
            throw new Error(`promtool is required in this run (CI, WARDLINE_REQUIRE_PROMTOOL=1 or PROMTOOL set): ${found.why}`)
          })
      : test.skip
if (found.path === null && !found.required) console.warn(`obs-alerts: the alert-rule tests are skipped: ${found.why}`)

const SINK = 'postgres'

/** The metrics the alerts read, on one registry. */
interface Replica {
  readonly registry: ReturnType<typeof metricsRegistry>
  readonly audit: AuditMetrics
  readonly budget: BudgetMetrics
  readonly upstream: UpstreamMetrics
}

/** The metrics as compose.ts wires them for a Postgres-storage replica: a readiness verdict, one sink with a spill file. */
function replica(dir: string, ready: { ok: boolean }): Replica {
  const registry = metricsRegistry()
  const m = { registry, audit: new AuditMetrics(registry), budget: new BudgetMetrics(registry), upstream: new UpstreamMetrics(registry) }
  // As openUpstream does for the one `upstream:`: its failure series exist (at 0) from the start.
  m.upstream.forServer(null)
  new ServerMetrics(registry).observeReadiness(() => Promise.resolve(ready.ok))
  m.audit.observeAuditSpill(SINK, [join(dir, 'spill.jsonl'), join(dir, 'spill.jsonl.replaying')])
  m.audit.auditQueueLimit.labels(SINK).set(100_000)
  m.audit.auditQueued.labels(SINK).set(0)
  return m
}

/** `minutes` scrapes of `m`, after `step(minute)` and some allowed traffic each minute. */
async function timeline(m: Replica, minutes: number, step: (minute: number) => void): Promise<Map<string, number>[]> {
  const out: Map<string, number>[] = []
  for (let minute = 0; minute < minutes; minute++) {
    for (let i = 0; i < 30; i++) m.audit.recordRequest('allow', 0.01)
    step(minute)
    out.push(samples(await m.registry.metrics()))
  }
  return out
}

function fired(scrapes: Map<string, number>[]): Map<string, number[]> {
  return firingAlerts(promtool, scrapes)
}

alertTest('steady allowed traffic fires nothing', async () => {
  const m = replica(tempDir(), { ok: true })
  expect([...fired(await timeline(m, 20, () => {})).keys()]).toEqual([])
})

alertTest('one burst of dropped audit entries (the sink counter born by it) fires WardlineAuditDropped', async () => {
  const m = replica(tempDir(), { ok: true })
  const alerts = fired(await timeline(m, 15, (minute) => minute === 5 && m.audit.auditDropped.labels(SINK).inc(40)))
  // A series born at 40 shows increase() no rise: the rule must still fire for it.
  expect(alerts.get('WardlineAuditDropped')).toEqual(expect.arrayContaining([5]))
  expect(Math.min(...(alerts.get('WardlineAuditDropped') ?? [99]))).toBe(5)
  expect([...alerts.keys()]).toEqual(['WardlineAuditDropped'])
})

alertTest('one batch of quarantined spilled entries fires WardlineAuditRejected, for an hour', async () => {
  const m = replica(tempDir(), { ok: true })
  const alerts = fired(await timeline(m, 15, (minute) => minute === 5 && m.audit.auditRejected.labels(SINK).inc(3)))
  expect(Math.min(...(alerts.get('WardlineAuditRejected') ?? [99]))).toBe(5)
  expect([...alerts.keys()]).toEqual(['WardlineAuditRejected'])
})

alertTest('a fail-open outage fires WardlineBudgetFailOpen within a minute, and it clears 5 minutes after the last one', async () => {
  const m = replica(tempDir(), { ok: true })
  const alerts = fired(await timeline(m, 25, (minute) => minute >= 5 && minute < 12 && m.budget.budgetFailOpen.inc(10)))
  const at = alerts.get('WardlineBudgetFailOpen') ?? []
  expect(Math.min(...at)).toBe(6)
  expect(Math.max(...at)).toBeLessThan(12 + 5)
  expect([...alerts.keys()]).toEqual(['WardlineBudgetFailOpen'])
})

alertTest('a spill backlog that stays 10 minutes fires WardlineAuditSpillPending; replayed, it clears', async () => {
  const dir = tempDir()
  const m = replica(dir, { ok: true })
  const alerts = fired(
    await timeline(m, 25, (minute) => {
      if (minute === 3) writeFileSync(join(dir, 'spill.jsonl'), 'x'.repeat(4096))
      if (minute === 18) rmSync(join(dir, 'spill.jsonl'))
    }),
  )
  expect(alerts.get('WardlineAuditSpillPending')).toEqual([13, 14, 15, 16, 17])
  expect([...alerts.keys()]).toEqual(['WardlineAuditSpillPending'])
})

alertTest('a spill backlog replayed within 10 minutes stays quiet', async () => {
  const dir = tempDir()
  const m = replica(dir, { ok: true })
  const alerts = fired(
    await timeline(m, 20, (minute) => {
      if (minute === 3) writeFileSync(join(dir, 'spill.jsonl'), 'x'.repeat(4096))
      if (minute === 9) rmSync(join(dir, 'spill.jsonl'))
    }),
  )
  expect([...alerts.keys()]).toEqual([])
})

alertTest('not ready for 5 minutes fires WardlineNotReady after 2; ready again, it clears', async () => {
  const ready = { ok: true }
  const m = replica(tempDir(), ready)
  const alerts = fired(await timeline(m, 15, (minute) => (ready.ok = minute < 5 || minute >= 10)))
  expect(alerts.get('WardlineNotReady')).toEqual([7, 8, 9])
  expect([...alerts.keys()]).toEqual(['WardlineNotReady'])
})

alertTest('a single refused upstream connection (an MCP server restart) pages nobody', async () => {
  const m = replica(tempDir(), { ok: true })
  const alerts = fired(await timeline(m, 15, (minute) => minute === 5 && m.upstream.upstreamError('unreachable')))
  // rate(…[5m]) > 0 stays true for 5 minutes after one failure, so with it `for: 2m` would fire a critical page at minute 7.
  expect([...alerts.keys()]).toEqual([])
})

alertTest(
  'an upstream that stays down (real gateway, real sockets) fires WardlineUpstreamDown, then WardlineUpstreamUnreachable and WardlineNotReady, and nothing before',
  async () => {
    // A probe every 50 ms, so each scrape below sees what the probe found by then.
    const h = await startHarness({ mode: 'stateless-json', config: { upstream_health_check: { interval_seconds: 0.05 } } })
    try {
      const scrapes: Map<string, number>[] = []
      for (let minute = 0; minute < 16; minute++) {
        if (minute === 5) {
          await h.upstream.close()
          await waitFor(async () => (await fetch(`${h.url}/readyz`)).status === 503, { what: 'the probe to find the upstream down' })
        }
        for (let i = 0; i < 3; i++) {
          const res = await fetch(`${h.url}/mcp`, {
            method: 'POST',
            headers: { ...MCP_HEADERS, ...as('alice') },
            body: JSON.stringify(toolCall('echo', { text: 'x' }, i)),
          })
          expect(res.status).toBe(minute < 5 ? 200 : 502)
          await res.arrayBuffer()
        }
        scrapes.push(samples(await (await fetch(`${h.url}/metrics`)).text()))
      }
      const alerts = fired(scrapes)
      const at = alerts.get('WardlineUpstreamUnreachable') ?? []
      expect(Math.min(...at)).toBe(7)
      expect(at).toContain(15)
      // The error ratio (warning) follows after its 10 minutes: 3 of 3 calls fail.
      expect(alerts.get('WardlineUpstreamErrors') ?? []).toEqual([15])
      // The probe needs no call: down from minute 5, it pages a minute later; /readyz has said 503 since then too.
      expect(Math.min(...(alerts.get('WardlineUpstreamDown') ?? []))).toBe(6)
      expect(Math.min(...(alerts.get('WardlineNotReady') ?? []))).toBe(7)
      expect([...alerts.keys()].sort()).toEqual([
        'WardlineNotReady',
        'WardlineUpstreamDown',
        'WardlineUpstreamErrors',
        'WardlineUpstreamUnreachable',
      ])
    } finally {
      await h.close()
    }
  },
)

alertTest(
  'one failed health probe (a blip shorter than a minute) pages nobody; a minute of them fires WardlineUpstreamDown, which clears once it is back',
  async () => {
    const m = replica(tempDir(), { ok: true })
    const probe = m.upstream.upstreamProbeListener()
    const result = (up: boolean) => ({
      up,
      status: up ? 406 : 0,
      cause: up ? null : 'connection refused',
      durationSeconds: 0.001,
      at: Date.now(),
    })
    const blip = fired(await timeline(m, 15, (minute) => probe(result(minute !== 5))))
    expect([...blip.keys()]).toEqual([])
    const outage = fired(await timeline(m, 15, (minute) => probe(result(minute < 5 || minute >= 10))))
    expect(outage.get('WardlineUpstreamDown')).toEqual([6, 7, 8, 9])
    expect([...outage.keys()]).toEqual(['WardlineUpstreamDown'])
  },
)

alertTest(
  'with servers:, a server that stays down fires WardlineUpstreamDown, WardlineUpstreamUnreachable and WardlineUpstreamErrors for that server alone; removed by a reload, it stops firing',
  async () => {
    const m = replica(tempDir(), { ok: true })
    // As openRoute does for two servers: each its own failure, probe and request series.
    const docs = m.audit.forServer('docs')
    const tickets = m.audit.forServer('tickets')
    m.upstream.forServer('docs')
    m.upstream.forServer('tickets')
    const probeDocs = m.upstream.upstreamProbeListener('docs')
    const probeTickets = m.upstream.upstreamProbeListener('tickets')
    const result = (up: boolean) => ({
      up,
      status: up ? 406 : 0,
      cause: up ? null : 'connection refused',
      durationSeconds: 0.001,
      at: Date.now(),
    })
    const scrapes = await timeline(m, 20, (minute) => {
      const docsDown = minute >= 5
      if (minute === 17) {
        // A reload removed docs: its route closed, and with it its series.
        m.audit.releaseServer('docs')
        m.upstream.releaseServer('docs')
      }
      if (minute < 17) probeDocs(result(!docsDown))
      probeTickets(result(true))
      for (let i = 0; i < 10; i++) {
        tickets.recordRequest('allow', 0.01)
        if (minute >= 17) continue
        docs.recordRequest(docsDown ? 'error' : 'allow', 0.01)
        if (docsDown) m.upstream.upstreamError('unreachable', 'docs')
      }
    })
    const alerts = firingAlertsByServer(promtool, scrapes)
    const servers = (name: string): string[] => [...new Set((alerts.get(name) ?? []).map((at) => at.split('@')[0]))]
    // The other server's callers never page anyone, and neither does the replica as a whole.
    expect([...alerts.keys()].sort()).toEqual(['WardlineUpstreamDown', 'WardlineUpstreamErrors', 'WardlineUpstreamUnreachable'])
    for (const name of alerts.keys()) expect(`${name}: ${servers(name).join(',')}`).toBe(`${name}: docs`)
    expect(alerts.get('WardlineUpstreamDown')?.[0]).toBe('docs@6')
    expect(alerts.get('WardlineUpstreamUnreachable')?.[0]).toBe('docs@7')
    // Its series gone at minute 17, the probe alert ends there; the error alerts once their range no longer holds any.
    expect(alerts.get('WardlineUpstreamDown')?.at(-1)).toBe('docs@16')
    expect(scrapes[17].has('wardline_upstream_up{server="docs"}')).toBe(false)
    expect(scrapes[17].get('wardline_upstream_up{server="tickets"}')).toBe(1)
    expect(Number(alerts.get('WardlineUpstreamUnreachable')?.at(-1)?.split('@')[1])).toBeLessThan(19)
  },
)

test('every counter alerts.yml takes increase() or rate() of is on /metrics at 0 before its first count, for every sink and kind', async () => {
  const dir = tempDir()
  const m = replica(dir, { ok: true })
  m.audit.auditQueueLimit.labels('jsonl:/var/log/wardline/audit.jsonl').set(100_000)
  const text = await m.registry.metrics()
  const s = samples(text)
  for (const kind of ['unreachable', 'timeout', 'reset', 'bad_response', 'other'])
    expect(s.get(`wardline_upstream_errors_total{kind="${kind}"}`)).toBe(0)
  for (const sink of [SINK, 'jsonl:/var/log/wardline/audit.jsonl']) expect(s.get(`wardline_audit_dropped_total{sink="${sink}"}`)).toBe(0)
  for (const name of ['spilled', 'replayed', 'rejected']) expect(s.get(`wardline_audit_${name}_total{sink="${SINK}"}`)).toBe(0)
  // A JSONL sink has no spill file: no spill series for it.
  expect(text).not.toContain('wardline_audit_spilled_total{sink="jsonl')
  for (const reason of ['unserved', 'late_verdict']) expect(s.get(`wardline_budget_refunds_total{reason="${reason}"}`)).toBe(0)
  for (const name of ['budget_fail_open', 'budget_degraded', 'audit_backpressure']) expect(s.get(`wardline_${name}_total{}`)).toBe(0)
})

test('every label value the rules and panels match on (decision, kind, reason) is one the gateway prints', () => {
  const root = resolve(__dirname, '../..')
  const text =
    readFileSync(join(root, 'deploy/prometheus/alerts.yml'), 'utf8') + readFileSync(join(root, 'deploy/grafana/wardline.json'), 'utf8')
  const printable: Record<string, readonly string[]> = {
    decision: DECISIONS,
    kind: UPSTREAM_ERROR_KINDS,
    reason: ['unserved', 'late_verdict'],
  }
  const matchers = [...text.matchAll(/(\w+)=~?\\?"([^"$\\]+)\\?"/g)].filter((m) => m[1] in printable)
  expect(matchers.length).toBeGreaterThanOrEqual(5)
  for (const [, label, value] of matchers)
    for (const v of value.split('|')) expect(`${label}=${v}: ${printable[label].includes(v)}`).toBe(`${label}=${v}: true`)
})
