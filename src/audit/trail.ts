import { describeError } from '../errors'
import { RateLimitedLog, type Logger, silentLogger } from '../log'
import { type AuditMetrics, CALL_OUTCOMES, type ServerSeries } from './metrics'
import type { Exchange } from '../pipeline/exchange'
import { stateKey } from '../pipeline/state'
import { type AuditEntry, auditEntries, entryCount, failedEntry, requestDecision } from './entry'
import type { AuditWriter } from './writer'

/** Audit queue slots reserved for the request's entries in every writer, 0 when none. */
const RESERVED = stateKey<number>('audit.reserved', 0)

/** The one place a finished request becomes audit entries, handed to every configured sink. */
export class AuditTrail {
  private readonly warn: RateLimitedLog

  constructor(
    readonly writers: readonly AuditWriter[],
    private readonly metrics: AuditMetrics,
    log: Logger = silentLogger(),
  ) {
    this.warn = new RateLimitedLog(log)
    for (const w of writers) {
      metrics.auditQueued.labels(w.sink.name).set(0)
    }
  }

  /**
   * Reserves, in every writer, the queue slots this request's entries need if it is forwarded
   * (entryCount), and notes the count on the request (`write` uses or releases them). Returns null when every
   * writer had room, or the request holds slots already; else the writer that had none: nothing is
   * then held anywhere, the refusal is counted in wardline_audit_backpressure_total and logged at
   * most once a minute.
   */
  reserve(ex: Exchange): AuditWriter | null {
    if (ex.get(RESERVED) > 0) return null
    const count = entryCount(ex)
    const full = this.reserveSlots(count)
    if (full === null) ex.set(RESERVED, count)
    return full
  }

  /** `count` slots in every writer, or none anywhere and the writer that had no room (counted and logged). */
  private reserveSlots(count: number): AuditWriter | null {
    const writers = this.writers
    for (let i = 0; i < writers.length; i++) {
      if (writers[i].reserve(count)) continue
      for (let j = 0; j < i; j++) writers[j].release(count)
      const full = writers[i]
      this.metrics.auditBackpressure.inc()
      this.warn.warn('audit-backpressure', 'audit queue full: calls refused with 503 (WL_AUDIT_BACKPRESSURE) until the sink catches up', {
        sink: full.sink.name,
        queued: full.pending,
        reserved: full.reservedEntries,
        needed: count,
      })
      return full
    }
    return null
  }

  /**
   * The request's entries, counted in the request metrics of `series` (its route's server; by default
   * the unlabelled ones). Throws when building or counting them does: the gateway then marks the
   * request failed and writes `entriesAfterFailure` instead.
   */
  entriesOf(ex: Exchange, series: ServerSeries = this.metrics.unlabelled): AuditEntry[] {
    const now = performance.now()
    const entries = auditEntries(ex, now)
    // One request, one count and one latency, however many entries a batch wrote.
    series.recordRequest(requestDecision(ex), (now - ex.startedMonoMs) / 1000)
    for (const e of entries) series.countEntry(e.decision, e.tenant, e.tool)
    if (ex.forwarded) countForwardedCalls(ex, now, series)
    return entries
  }

  /**
   * The request metrics a route of `server` counts in, labelled with its name (null: unlabelled);
   * taken once when the route opens, handed back by releaseSeries when it closes.
   */
  seriesFor(server: string | null): ServerSeries {
    return this.metrics.forServer(server)
  }

  /** A route of `server` closed: its series go once no route of that name is left. */
  releaseSeries(server: string): void {
    this.metrics.releaseServer(server)
  }

  /**
   * The entries of a request whose entriesOf threw, once the gateway has marked it failed: built
   * again (the request metrics left as they are), or, when building throws again, the one entry
   * that cannot fail (failedEntry). Never throws: the request is audited whatever broke.
   */
  entriesAfterFailure(ex: Exchange): AuditEntry[] {
    const now = performance.now()
    try {
      return auditEntries(ex, now)
    } catch {
      return [failedEntry(ex, now)]
    }
  }

  /** Hands the request's entries to every writer, using and then releasing the slots it reserved (if any). */
  write(ex: Exchange, entries: readonly AuditEntry[]): void {
    const reserved = ex.get(RESERVED)
    if (reserved > 0) ex.set(RESERVED, 0) // a second write of the same request must not release slots twice
    for (const w of this.writers) w.record(entries, reserved)
  }

  /**
   * Reserves one queue slot in every writer for an entry that is not a proxied request's (an admin API
   * call), or none when a writer is full (counted and logged as for reserve). The caller then acts only
   * if this returned true, so an admin action is never unaudited.
   */
  reserveOne(): boolean {
    return this.reserveSlots(1) === null
  }

  /**
   * Writes one entry that is not a proxied request's (an admin API call) to every writer, into the
   * slot reserveOne held when `reserved` is 1. Counted in the entries metric, not in the request
   * metrics: those describe the proxied traffic.
   */
  recordEntry(entry: AuditEntry, reserved: 0 | 1): void {
    for (const w of this.writers) w.record([entry], reserved)
    // Counted once the entry is queued: a count that throws must not cost the entry of an action that
    // already ran, nor the slot reserved for it.
    try {
      this.metrics.countEntry(entry.decision, entry.tenant, entry.tool)
    } catch (err) {
      this.warn.warn('audit-entry-metric', 'an admin entry was not counted in wardline_audit_entries_total', { error: describeError(err) })
    }
  }

  /** SIGHUP: file sinks reopen their paths (log rotation). */
  reopen(): void {
    for (const w of this.writers) w.sink.reopen?.()
  }

  async flush(): Promise<void> {
    await Promise.all(this.writers.map((w) => w.flush()))
  }

  async close(): Promise<void> {
    await Promise.all(this.writers.map((w) => w.close()))
  }

  /** Refreshes the queue gauges; called by /metrics so the hot path never touches them. */
  observeQueues(): void {
    for (const w of this.writers) this.metrics.auditQueued.labels(w.sink.name).set(w.pending)
  }
}

/**
 * wardline_forwarded_calls_total and _call_duration_seconds: each gated call of a forwarded request,
 * the calls that got an audit entry of their own (a batch element counts alone, with the batch's
 * outcome and duration, as its entry has the batch's status and latency). Counted where every request
 * ends once (entriesOf), rather than in the relay: the relay does not see a request the client left
 * before it was sent, and its answer's end is only a moment before this.
 */
function countForwardedCalls(ex: Exchange, nowMonoMs: number, series: ServerSeries): void {
  const outcome = callOutcome(ex)
  const seconds = (nowMonoMs - ex.forwardedMonoMs) / 1000
  const calls = ex.calls
  for (let i = 0; i < calls.length; i++) if (calls[i].gated) series.countForwardedCall(calls[i].target, outcome, seconds)
}

const OK = CALL_OUTCOMES.indexOf('ok')
const HTTP_ERROR = CALL_OUTCOMES.indexOf('http_error')
const UPSTREAM_ERROR = CALL_OUTCOMES.indexOf('upstream_error')
const CLIENT_CLOSED = CALL_OUTCOMES.indexOf('client_closed')

/**
 * The CALL_OUTCOMES index of a forwarded request, from what the relay left on the exchange: a failure
 * it could not relay is `error` (a stream cut after its head too, which is also `aborted`), a client
 * that left (or a connection shutdown cut) is `aborted` alone, and otherwise the status is the
 * upstream's own.
 */
function callOutcome(ex: Exchange): number {
  if (ex.decision === 'error') return UPSTREAM_ERROR
  if (ex.aborted) return CLIENT_CLOSED
  return ex.status >= 200 && ex.status <= 299 ? OK : HTTP_ERROR
}
