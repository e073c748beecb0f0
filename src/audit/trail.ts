import type { Metrics } from '../metrics'
import type { Exchange } from '../pipeline/exchange'
import { auditEntries } from './entry'
import type { AuditWriter } from './writer'

/** The one place a finished request becomes audit entries, handed to every configured sink. */
export class AuditTrail {
  constructor(readonly writers: readonly AuditWriter[], private readonly metrics: Metrics) {
    for (const w of writers) {
      metrics.auditQueued.labels(w.sink.name).set(0)
    }
  }

  record(ex: Exchange): void {
    const now = performance.now()
    const entries = auditEntries(ex, now)
    const seconds = (now - ex.startedMono) / 1000
    for (const e of entries) {
      this.metrics.requests.labels(e.decision).inc()
      this.metrics.duration.labels(e.decision).observe(seconds)
    }
    for (const w of this.writers) w.record(entries)
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
