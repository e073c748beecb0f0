import { statSync } from 'node:fs'
import { Counter, type Metric, type Registry } from 'prom-client'
import type { BudgetConfig, PolicyConfig } from '../config/types'
import { FeatureMetrics } from '../metrics-registry'
import { DECISIONS, type Decision } from '../pipeline/exchange'

const DURATION_BUCKETS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/**
 * The audit trail's metrics: requests, entries and forwarded calls counted where their audit records
 * are (AuditTrail.entriesOf), and each sink's queue, drops, spill and replay.
 *
 * The per-request metrics are plain numbers that the registry reads only when /metrics is scraped:
 * prom-client's own inc() and observe() hash and validate their labels on every call, which cost
 * about 1 µs per request (3% of the gateway's CPU); the arrays take a few tens of ns.
 */
export class AuditMetrics extends FeatureMetrics {
  /**
   * The per-request numbers of each server (`servers:`), and under null those of requests without one
   * (`upstream:` alone, a path naming no server, an admin entry): printed without a `server` label,
   * exactly as before servers existed (HELP texts too: docs/operations.md tells of `server`). Each is
   * made once per route (forServer), so a request finds its own with no lookup; the collectors below
   * walk them at scrape time, unlabelled first.
   */
  private readonly series = new Map<string | null, ServerSeries>()
  /** The names refusals and forwarded calls are labelled with (nameLabels), for series made later. */
  private names: LabelledNames = { tenants: [], tools: [] }
  /** The series of requests without a server. */
  readonly unlabelled: ServerSeries = this.seriesOf(null)
  private readonly all = (): Iterable<ServerSeries> => this.series.values()
  // Registered in the order they always were, so /metrics prints its families in the same order.
  readonly requestsMetric = registerDecisionCounter(
    this.registry,
    'wardline_requests_total',
    'Proxied HTTP requests, by decision (a batch counts once; see wardline_audit_entries_total)',
    this.all,
    (s) => s.requests,
  )
  readonly entriesMetric = registerDecisionCounter(
    this.registry,
    'wardline_audit_entries_total',
    'Audit entries recorded, by decision (a forwarded batch writes one per gated element, plus one for the rest)',
    this.all,
    (s) => s.entries,
  )
  readonly durationMetric = registerDecisionHistogram(
    this.registry,
    'wardline_request_duration_seconds',
    'Time from request arrival to the end of the response, by decision (one observation per request)',
    this.all,
  )
  readonly auditDropped = this.counter(
    'wardline_audit_dropped_total',
    'Audit entries that could not be written or queued, by sink',
    ['sink'],
    {
      collect: (): Promise<void> => this.zeroBySink(this.auditDropped, false),
    },
  )
  readonly auditSpilled = this.counter(
    'wardline_audit_spilled_total',
    'Audit entries written to the local spill file because their sink kept failing (replayed later), by sink',
    ['sink'],
    {
      collect: (): Promise<void> => this.zeroBySink(this.auditSpilled, true),
    },
  )
  readonly auditReplayed = this.counter(
    'wardline_audit_replayed_total',
    'Spilled audit entries written into their sink by a replay of the spill file, by sink',
    ['sink'],
    {
      collect: (): Promise<void> => this.zeroBySink(this.auditReplayed, true),
    },
  )
  readonly auditRejected = this.counter(
    'wardline_audit_rejected_total',
    'Spilled audit entries their sink refused for their data, moved to the quarantine file <spill_file>.rejected, by sink',
    ['sink'],
    {
      collect: (): Promise<void> => this.zeroBySink(this.auditRejected, true),
    },
  )
  readonly auditQueued = this.gauge('wardline_audit_queue_entries', 'Audit entries waiting to be written, by sink', ['sink'])
  readonly auditBackpressure = this.counter(
    'wardline_audit_backpressure_total',
    'Requests refused with 503 (WL_AUDIT_BACKPRESSURE) because an audit queue had no room to reserve their entries',
  )
  readonly auditRetentionDeleted = this.counter(
    'wardline_audit_retention_deleted_total',
    'audit_entries rows older than audit.retention_days deleted by this replica',
  )

  // Refused, failed and unauthorized audit entries by tenant and by tool, counted where
  // wardline_audit_entries_total is (AuditTrail.entriesOf), so they add up to its non-allow decisions.
  // Label values are configured names only (labelledNames), so a caller cannot mint series.
  readonly refusalsByTenantMetric = registerRefusals(
    this.registry,
    'wardline_refusals_by_tenant_total',
    'Audit entries that were refused or failed (deny, throttled, unauthorized, error), by tenant: a tenant named in budget.tenants or a policy rule, else other; none without a tenant',
    'tenant',
    this.all,
    (s) => s.refusalsByTenant,
  )
  readonly refusalsByToolMetric = registerRefusals(
    this.registry,
    'wardline_refusals_by_tool_total',
    'Audit entries that were refused or failed (deny, throttled, unauthorized, error), by tool: a tool named in budget.tools or a policy rule, else other; none for calls without one',
    'tool',
    this.all,
    (s) => s.refusalsByTool,
  )
  // Gated calls forwarded to the MCP server, by tool and outcome, and their upstream latency by tool;
  // counted in AuditTrail.entriesOf from the same calls the audit entries are, with the same bounded
  // tool label as the refusals.
  readonly forwardedCallsMetric = registerForwardedCalls(
    this.registry,
    'wardline_forwarded_calls_total',
    'Gated calls (tools/call, resources/*, prompts/*, completion/complete) forwarded to the MCP server, one per call (a batch element counts alone), by outcome (ok: a 2xx answer that ended; http_error: another status; upstream_error: no answer or a broken one; client_closed: the client left first) and tool: a tool named in budget.tools or a policy rule, else other; none for calls without one',
    'wardline_forwarded_call_duration_seconds',
    'Time from handing a forwarded request to the MCP server until its answer ended (an SSE answer: its last event), by tool; one observation per gated call, whatever its outcome',
    this.all,
  )
  readonly auditQueueLimit = this.gauge(
    'wardline_audit_queue_limit_entries',
    'audit.max_queue_entries: the queue length at which calls get 503 (WL_AUDIT_BACKPRESSURE), by sink',
    ['sink'],
  )
  /** Spill files per sink (the file and its .replaying copy), measured at scrape time. */
  private readonly spillFiles = new Map<string, readonly string[]>()

  constructor(...args: ConstructorParameters<typeof FeatureMetrics>) {
    super(...args)
    const spillFiles = this.spillFiles
    this.gauge(
      'wardline_audit_spill_bytes',
      'Bytes of audit entries waiting in the spill file (and its .replaying copy) for their sink, by sink; 0 once replayed',
      ['sink'],
      {
        collect() {
          for (const [sink, paths] of spillFiles) this.labels(sink).set(fileBytes(paths))
        },
      },
    )
  }

  /**
   * The names refusals are labelled with (labelledNames of the running config); at startup and at each
   * reload. Counts of names kept carry on; a name no longer configured loses its series.
   */
  nameLabels(names: LabelledNames): void {
    this.names = names
    for (const series of this.series.values()) series.setNames(names)
  }

  /**
   * The series of one server's requests, made on its route's first opening and shared by every route
   * opened under that name until each has let go (releaseServer): a server whose settings a reload
   * changed keeps counting where it was. Null is the unlabelled series, never released.
   */
  forServer(server: string | null): ServerSeries {
    const series = this.seriesOf(server)
    if (server !== null) series.users++
    return series
  }

  private seriesOf(server: string | null): ServerSeries {
    let series = this.series.get(server)
    if (series === undefined) this.series.set(server, (series = new ServerSeries(server, this.names)))
    return series
  }

  /** A route of `server` closed: once none is left (a reload removed the server), its series stop printing. */
  releaseServer(server: string): void {
    const series = this.series.get(server)
    if (series !== undefined && --series.users <= 0) this.series.delete(server)
  }

  /** Where wardline_audit_spill_bytes{sink} is measured (stat at scrape time; a missing file is 0 bytes). */
  observeAuditSpill(sink: string, paths: readonly string[]): void {
    this.spillFiles.set(sink, paths)
  }

  /**
   * Prints a per-sink counter at 0 for every sink (every sink with a spill file, when `spilling`) before
   * its first count: a series born at its first count hides that count from increase(), so a single
   * burst of drops or quarantined entries would never fire WardlineAuditDropped or WardlineAuditRejected.
   */
  private async zeroBySink(counter: Counter<'sink'>, spilling: boolean): Promise<void> {
    const sinks = spilling ? [...this.spillFiles.keys()] : (await this.auditQueueLimit.get()).values.map((v) => String(v.labels.sink))
    for (const sink of sinks) counter.inc({ sink }, 0)
  }

  /** One finished request: its count and its latency, under the decision the request as a whole came to. */
  recordRequest(decision: Decision, seconds: number): void {
    this.unlabelled.recordRequest(decision, seconds)
  }

  /** One audit entry without a server (an admin action, a path naming no server); see ServerSeries.countEntry. */
  countEntry(decision: Decision, tenant = '', tool = ''): void {
    this.unlabelled.countEntry(decision, tenant, tool)
  }

  /** One gated call of a forwarded request without a server; see ServerSeries.countForwardedCall. */
  countForwardedCall(target: string, outcome: number, seconds: number): void {
    this.unlabelled.countForwardedCall(target, outcome, seconds)
  }
}

/**
 * The per-request numbers of one server (null: requests without one), in typed arrays: counting is a
 * few array slots (and a Map lookup for a tenant or tool), with no label hashed until a scrape.
 */
export class ServerSeries {
  /** Routes holding this series (AuditMetrics.forServer); it stops printing when the last lets go. */
  users = 0
  readonly requests = new DecisionCounts()
  readonly entries = new DecisionCounts()
  /** Per decision, how many observations fell in each bucket and no lower one (not cumulative). */
  readonly durationBuckets = new Float64Array(DECISIONS.length * DURATION_BUCKETS.length)
  readonly durationSums = new Float64Array(DECISIONS.length)
  readonly durationCounts = new Float64Array(DECISIONS.length)
  readonly durationSeen: number[] = []
  readonly refusalsByTenant = new NameRows(DECISIONS.length)
  readonly refusalsByTool = new NameRows(DECISIONS.length)
  /**
   * Forwarded calls by tool: a row holds a count per outcome, then a count per bucket (the bucket an
   * observation fell in and no lower one, not cumulative), then the sum of the seconds. Every call
   * counted is observed once, so a tool's _count is the sum of its outcomes and needs no slot of its own.
   */
  readonly forwarded = new NameRows(FORWARDED_WIDTH)

  constructor(
    /** The server's name; null for requests without one. */
    readonly server: string | null,
    names: LabelledNames,
  ) {
    this.setNames(names)
  }

  setNames(names: LabelledNames): void {
    this.refusalsByTenant.setNames(names.tenants)
    this.refusalsByTool.setNames(names.tools)
    this.forwarded.setNames(names.tools)
  }

  /** One finished request: its count and its latency, under the decision the request as a whole came to. */
  recordRequest(decision: Decision, seconds: number): void {
    // indexOf over six interned strings took ~5 ns where a Record<Decision, number> read took ~12 ns
    // (a keyed load with a changing key), measured in isolation.
    const i = DECISIONS.indexOf(decision)
    this.requests.add(i)
    // prom-client's observe() threw here; the caller is the audit record, which must never fail over a metric.
    if (!Number.isFinite(seconds)) return
    if (this.durationCounts[i]++ === 0) this.durationSeen.push(i)
    this.durationSums[i] += seconds
    const b = durationBucket(seconds)
    if (b >= 0) this.durationBuckets[i * DURATION_BUCKETS.length + b]++
  }

  /** One audit entry written, under its own decision; a refusal also by its tenant and tool (`''`: none). */
  countEntry(decision: Decision, tenant = '', tool = ''): void {
    const i = DECISIONS.indexOf(decision)
    this.entries.add(i)
    // An allowed or passed-through entry (the hot path) pays this one typed-array read and nothing else.
    if (REFUSAL[i] === 1) {
      this.refusalsByTenant.values[this.refusalsByTenant.offset(tenant) + i]++
      this.refusalsByTool.values[this.refusalsByTool.offset(tool) + i]++
    }
  }

  /**
   * One gated call of a forwarded request: its target (`''`: none), its outcome (a CALL_OUTCOMES index)
   * and the seconds from the forward to the end of the answer. A Map lookup and a few array slots.
   */
  countForwardedCall(target: string, outcome: number, seconds: number): void {
    const values = this.forwarded.values
    const at = this.forwarded.offset(target)
    values[at + outcome]++
    values[at + FORWARDED_SUM] += seconds
    const b = durationBucket(seconds)
    if (b >= 0) values[at + CALL_OUTCOMES.length + b]++
  }
}

/**
 * How a forwarded call ended, as the gateway sees it without reading the answer's body (the allow path
 * never holds an answer): `ok`, the MCP server answered 2xx and the answer reached its end; `http_error`,
 * it answered another status (a 404 for an unknown session, a 429, a 500), relayed as it was;
 * `upstream_error`, no answer or a broken one (the 502s, 504s and cut streams of
 * wardline_upstream_errors_total); `client_closed`, the client left (or shutdown cut the connection)
 * before the answer ended. A tool result with `isError: true` and a JSON-RPC error both travel inside a
 * 2xx answer, so both are `ok` here.
 */
export const CALL_OUTCOMES = ['ok', 'http_error', 'upstream_error', 'client_closed'] as const
export type CallOutcome = (typeof CALL_OUTCOMES)[number]

/** Decisions counted by tenant and tool: everything but allow and passthrough, by DECISIONS index. */
const REFUSAL = Uint8Array.from(DECISIONS, (d) => (d === 'allow' || d === 'passthrough' ? 0 : 1))

/**
 * Most names one label takes from the config. A tenant is a series per refusal decision (four); a tool
 * is that, plus one per forwarded-call outcome (four) and the 17 of its latency histogram (14 buckets,
 * +Inf, _sum, _count). 250 names is at most 1 000 tenant and 6 250 tool series a replica, which a
 * Prometheus holds without notice; past it a config listing thousands of names would cost more than
 * the dashboards are worth. Names beyond it (in config order) count as `other`.
 */
export const MAX_LABELLED_NAMES = 250

/** Label value for a tenant or tool no configured name matches. */
export const OTHER_LABEL = 'other'
/** Label value for an entry without a tenant (unauthenticated) or without a tool (not a gated call). */
export const NONE_LABEL = 'none'
/** Prefix of a configured name that would read as a reserved value (`other`, `none`) or as another prefixed name. */
export const CONFIGURED_PREFIX = 'configured:'

export interface LabelledNames {
  readonly tenants: readonly string[]
  readonly tools: readonly string[]
}

/**
 * The names that may appear as label values: tenants under budget.tenants and in policy rules' `tenant`,
 * tools under budget.tools (with servers, the tool of `<server>/<tool>`: entries carry the tool name
 * as called) and in rules' `tool`, each only when written without `*` (a glob names no one value). Config order, duplicates dropped, at most MAX_LABELLED_NAMES each. A caller chooses the
 * tool names it sends and (with header auth, or an identity provider it controls) its tenant: taking
 * label values from requests would let it mint series without bound, so only the operator's file does.
 * A top-N of the busiest names was the other choice: it needs per-name counts of every name seen (the
 * same unbounded memory) and its labels change meaning as the ranking moves.
 */
export function labelledNames(budget: BudgetConfig, policy: PolicyConfig | null): LabelledNames {
  const tenants = new Set(Object.keys(budget.tenants))
  const tools = new Set(Object.values(budget.tools).map((t) => t.tool))
  for (const rule of policy?.rules ?? []) {
    if (rule.tenant !== null && !rule.tenant.includes('*')) tenants.add(rule.tenant)
    if (!rule.target.includes('*')) tools.add(rule.target)
  }
  return { tenants: [...tenants].slice(0, MAX_LABELLED_NAMES), tools: [...tools].slice(0, MAX_LABELLED_NAMES) }
}

/**
 * The label value of a configured name: the name itself, unless it is `other` or `none` or starts with
 * `configured:`, which get `configured:` in front. A tenant named `other` is then `configured:other`
 * and never mixes with the unconfigured rest, and no two names share a value (a name already starting
 * with the prefix gets a second one).
 */
export function labelValue(name: string): string {
  return name === OTHER_LABEL || name === NONE_LABEL || name.startsWith(CONFIGURED_PREFIX) ? CONFIGURED_PREFIX + name : name
}

/**
 * Numbers by one bounded name label (tenant or tool), in one Float64Array of `width` numbers a row:
 * row 0 is `none`, row 1 `other`, then one row per configured name. Finding a row is one Map lookup.
 */
class NameRows {
  /** Configured name → row. */
  private rows = new Map<string, number>()
  /** Row → the name it counts ('' for none, and for other). */
  private names: string[] = ['', '']
  values: Float64Array

  constructor(private readonly width: number) {
    this.values = new Float64Array(2 * width)
  }

  get count(): number {
    return this.names.length
  }

  /** Where the row of `name` (`''`: none) starts in `values`. */
  offset(name: string): number {
    return (name === '' ? 0 : (this.rows.get(name) ?? 1)) * this.width
  }

  /** The label value of a row. */
  label(row: number): string {
    return row === 0 ? NONE_LABEL : row === 1 ? OTHER_LABEL : labelValue(this.names[row])
  }

  /** Replaces the configured names, carrying the numbers of `none`, `other` and every name kept. */
  setNames(names: readonly string[]): void {
    const width = this.width
    const values = new Float64Array((names.length + 2) * width)
    values.set(this.values.subarray(0, 2 * width))
    const rows = new Map<string, number>()
    for (let i = 0; i < names.length; i++) {
      rows.set(names[i], i + 2)
      const old = this.rows.get(names[i])
      if (old !== undefined) values.set(this.values.subarray(old * width, (old + 1) * width), (i + 2) * width)
    }
    this.rows = rows
    this.names = ['', '', ...names]
    this.values = values
  }
}

/** The first bucket of DURATION_BUCKETS that holds `seconds` (its bound is not below it); -1 past the last (+Inf). */
function durationBucket(seconds: number): number {
  const bounds = DURATION_BUCKETS
  for (let b = 0; b < bounds.length; b++) if (seconds <= bounds[b]) return b
  return -1
}

/** A forwarded-calls row of ServerSeries: a count per outcome, a count per bucket, the sum of the seconds. */
const FORWARDED_SUM = CALL_OUTCOMES.length + DURATION_BUCKETS.length
const FORWARDED_WIDTH = FORWARDED_SUM + 1

/** Labels of one sample: `label` = `value`, then `server` when the series has one (unlabelled: as before servers existed). */
function withServer(series: ServerSeries, labels: Record<string, string | number>): Record<string, string | number> {
  if (series.server !== null) labels.server = series.server
  return labels
}

/**
 * A counter by decision and one bounded name label (tenant or tool), a row of NameRows per name in
 * each server's series. Only rows counted print, as the decision counters' decisions do.
 */
function registerRefusals(
  registry: Registry,
  name: string,
  help: string,
  label: 'tenant' | 'tool',
  all: () => Iterable<ServerSeries>,
  rowsOf: (s: ServerSeries) => NameRows,
): Counter<'decision' | 'tenant' | 'tool' | 'server'> {
  return new Counter({
    name,
    help,
    labelNames: ['decision', label, 'server'] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const series of all()) {
        const rows = rowsOf(series)
        const counts = rows.values
        for (let row = 0; row < rows.count; row++) {
          for (let d = 0; d < DECISIONS.length; d++) {
            const n = counts[row * DECISIONS.length + d]
            if (n > 0) this.inc(withServer(series, { decision: DECISIONS[d], [label]: rows.label(row) }), n)
          }
        }
      }
    },
  })
}

/**
 * wardline_forwarded_calls_total{outcome, tool} and wardline_forwarded_call_duration_seconds{tool}
 * (each with `server` where the calls had one), from the forwarded rows of every ServerSeries: one
 * Map lookup served both when counted. The histogram registers itself as the request histogram does.
 */
function registerForwardedCalls(
  registry: Registry,
  countName: string,
  countHelp: string,
  durationName: string,
  durationHelp: string,
  all: () => Iterable<ServerSeries>,
): Counter<'outcome' | 'tool' | 'server'> {
  const outcomes = CALL_OUTCOMES.length
  const counter = new Counter({
    name: countName,
    help: countHelp,
    labelNames: ['outcome', 'tool', 'server'] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const series of all()) {
        const rows = series.forwarded
        const values = rows.values
        for (let row = 0; row < rows.count; row++) {
          for (let o = 0; o < outcomes; o++) {
            const n = values[row * FORWARDED_WIDTH + o]
            if (n > 0) this.inc(withServer(series, { outcome: CALL_OUTCOMES[o], tool: rows.label(row) }), n)
          }
        }
      }
    },
  })
  const durations = (): Promise<HistogramMetric> => {
    const out: HistogramSample[] = []
    for (const series of all()) {
      const rows = series.forwarded
      for (let row = 0; row < rows.count; row++) {
        const at = row * FORWARDED_WIDTH
        let count = 0
        for (let o = 0; o < outcomes; o++) count += rows.values[at + o]
        if (count === 0) continue
        pushHistogram(
          out,
          durationName,
          'tool',
          rows.label(row),
          series,
          rows.values,
          at + outcomes,
          rows.values[at + FORWARDED_SUM],
          count,
        )
      }
    }
    return Promise.resolve({ name: durationName, help: durationHelp, type: 'histogram', values: out, aggregator: 'sum' })
  }
  registry.registerMetric({
    name: durationName,
    help: durationHelp,
    type: 'histogram',
    aggregator: 'sum',
    get: durations,
    // Registry.resetMetrics() (nothing calls it): the rows are the counter's too, and its collect() refills it from them.
    reset: () => undefined,
  } as unknown as Metric)
  return counter
}

/** Total size of the files that exist among `paths`. */
function fileBytes(paths: readonly string[]): number {
  let bytes = 0
  for (const path of paths) {
    try {
      bytes += statSync(path).size
    } catch {
      // Not there: nothing waits in it.
    }
  }
  return bytes
}

/** Counts by decision, one array slot each; the decisions in the order first counted (prom-client printed label values in that order). */
class DecisionCounts {
  readonly counts = new Float64Array(DECISIONS.length)
  readonly seen: number[] = []

  add(i: number): void {
    if (this.counts[i]++ === 0) this.seen.push(i)
  }
}

/**
 * A counter by decision (and server) whose hot path is one array slot; its prom-client Counter copies
 * the slots in when the registry is scraped (collect()), so the text and JSON are prom-client's own.
 */
function registerDecisionCounter(
  registry: Registry,
  name: string,
  help: string,
  all: () => Iterable<ServerSeries>,
  countsOf: (s: ServerSeries) => DecisionCounts,
): Counter<'decision' | 'server'> {
  return new Counter({
    name,
    help,
    labelNames: ['decision', 'server'] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const series of all()) {
        const { counts, seen } = countsOf(series)
        for (const i of seen) this.inc(withServer(series, { decision: DECISIONS[i] }), counts[i])
      }
    },
  })
}

interface HistogramSample {
  readonly labels: { readonly le?: number | '+Inf'; readonly [label: string]: string | number | undefined }
  readonly value: number
  readonly metricName: string
}

interface HistogramMetric {
  name: string
  help: string
  type: string
  values: HistogramSample[]
  aggregator: string
}

/**
 * The samples of one labelled histogram series in prom-client's order: each bucket cumulative (`le` is
 * inclusive), then +Inf, _sum and _count. `buckets[at…]` holds per bucket the observations that fell in
 * it and no lower one.
 */
function pushHistogram(
  out: HistogramSample[],
  name: string,
  label: string,
  value: string,
  series: ServerSeries,
  buckets: Float64Array,
  at: number,
  sum: number,
  count: number,
): void {
  const bucketName = `${name}_bucket`
  const bounds = DURATION_BUCKETS
  let cumulative = 0
  for (let b = 0; b < bounds.length; b++) {
    cumulative += buckets[at + b]
    out.push({ labels: withServer(series, { le: bounds[b], [label]: value }), value: cumulative, metricName: bucketName })
  }
  out.push({ labels: withServer(series, { le: '+Inf', [label]: value }), value: count, metricName: bucketName })
  out.push({ labels: withServer(series, { [label]: value }), value: sum, metricName: `${name}_sum` })
  out.push({ labels: withServer(series, { [label]: value }), value: count, metricName: `${name}_count` })
}

/**
 * The request histogram by decision (and server), kept in each ServerSeries's Float64Arrays.
 * prom-client has no way to set a Histogram's buckets, so this registers a metric of its own: a
 * Registry reads a metric only through `name`, `type`, `get()` (prom-client's MetricObject: name,
 * help, type, values, aggregator) and `reset()` (prom-client 15, lib/registry.js). get() yields the
 * samples prom-client's Histogram did, in its order: per decision first observed, each bucket
 * cumulative (`le` is inclusive), then +Inf, _sum and _count.
 */
function registerDecisionHistogram(registry: Registry, name: string, help: string, all: () => Iterable<ServerSeries>): Metric {
  const get = (): Promise<HistogramMetric> => {
    const values: HistogramSample[] = []
    const width = DURATION_BUCKETS.length
    for (const series of all()) {
      for (const i of series.durationSeen) {
        pushHistogram(
          values,
          name,
          'decision',
          DECISIONS[i],
          series,
          series.durationBuckets,
          i * width,
          series.durationSums[i],
          series.durationCounts[i],
        )
      }
    }
    return Promise.resolve({ name, help, type: 'histogram', values, aggregator: 'sum' })
  }
  const reset = (): void => {
    for (const series of all()) {
      series.durationBuckets.fill(0)
      series.durationSums.fill(0)
      series.durationCounts.fill(0)
      series.durationSeen.length = 0
    }
  }
  const metric = { name, help, type: 'histogram', aggregator: 'sum', get, reset } as unknown as Metric
  registry.registerMetric(metric)
  return metric
}
