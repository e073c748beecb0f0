import type { Counter, Histogram } from 'prom-client'
import type { Metrics } from '../metrics'
import { DECISIONS, type Decision, type Exchange } from '../pipeline/exchange'
import { auditEntries } from './entry'
import type { AuditWriter } from './writer'

/** The one place a finished request becomes audit entries, handed to every configured sink. */
export class AuditTrail {
  /**
   * The labelled metric children, made once: prom-client's labels() builds a label object and bound
   * functions on every call, which would be several allocations per audit entry.
   */
  private readonly byDecision = new Map<Decision, { count: Counter.Internal; time: Histogram.Internal<'decision'> }>()

  constructor(readonly writers: readonly AuditWriter[], private readonly metrics: Metrics) {
    for (const w of writers) {
      metrics.auditQueued.labels(w.sink.name).set(0)
    }
    for (const d of DECISIONS) this.byDecision.set(d, { count: metrics.requests.labels(d), time: metrics.duration.labels(d) })
  }

  record(ex: Exchange): void {
    const now = performance.now()
    const entries = auditEntries(ex, now)
    const seconds = (now - ex.startedMonoMs) / 1000
    for (const e of entries) {
      const m = this.byDecision.get(e.decision)!
      m.count.inc()
      m.time.observe(seconds)
    }
    for (const w of this.writers) w.record(entries)
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
