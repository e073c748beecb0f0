import { appendFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import type { AuditSink } from '../../src/audit/sink'
import { AuditSpill } from '../../src/audit/spill'
import { AuditWriter } from '../../src/audit/writer'
import { silentLogger } from '../../src/log'
import { AuditMetrics } from '../../src/audit/metrics'
import { tempDir } from '../helpers/harness'
import { auditEntry } from '../helpers/audit-entry'

/** A sink that keeps what it is given, fails while `down`, and refuses (for its data) the entry 'poison'. */
class ToggleSink implements AuditSink {
  readonly name = 'toggle'
  down = true
  readonly written: string[] = []
  write(batch: readonly AuditEntry[]): Promise<void> {
    if (this.down) return Promise.reject(new Error('ECONNREFUSED'))
    if (batch.some((e) => e.request_id === 'poison')) return Promise.reject(Object.assign(new Error('bad value'), { code: '22P02' }))
    this.written.push(...batch.map((e) => e.request_id))
    return Promise.resolve()
  }
  rejects(err: unknown): boolean {
    return (err as { code?: unknown }).code === '22P02'
  }
  close(): Promise<void> {
    return Promise.resolve()
  }
}

/** The value of a counter for one sink, as /metrics would show it. */
async function counted(metrics: AuditMetrics, name: string, sink: string): Promise<number> {
  const metric = metrics.registry.getSingleMetric(name)
  if (metric === undefined) throw new Error(`no metric ${name}`)
  return (await metric.get()).values.find((v) => v.labels.sink === sink)?.value ?? 0
}

test('spilled, replayed, rejected and dropped entries are reported through the callbacks into their metrics', async () => {
  const metrics = new AuditMetrics()
  const sink = new ToggleSink()
  const spill = new AuditSpill(join(tempDir(), 'audit-spill.jsonl'))
  // What compose.ts wires for the Postgres writer.
  const writer = new AuditWriter(sink, silentLogger(), {
    maxQueueEntries: 3,
    maxAttempts: 1,
    retryDelayMs: 1,
    replayIntervalMs: 60_000,
    spill,
    onDropped: (n, name) => metrics.auditDropped.labels(name).inc(n),
    onSpilled: (n, name) => metrics.auditSpilled.labels(name).inc(n),
    onRejected: (n, name) => metrics.auditRejected.labels(name).inc(n),
    onReplayed: (n, name) => metrics.auditReplayed.labels(name).inc(n),
  })
  appendFileSync(spill.path, 'not json at all\n') // a line torn by a crash in an earlier run
  writer.record([auditEntry('a'), auditEntry('poison'), auditEntry('b')])
  await writer.flush()
  expect(await counted(metrics, 'wardline_audit_spilled_total', 'toggle')).toBe(3)

  writer.record([auditEntry('c'), auditEntry('d'), auditEntry('e'), auditEntry('f')]) // one more than the queue holds: 'f' is dropped
  await writer.flush()
  expect(await counted(metrics, 'wardline_audit_dropped_total', 'toggle')).toBe(1)
  expect(await counted(metrics, 'wardline_audit_spilled_total', 'toggle')).toBe(6)

  sink.down = false
  expect(await writer.replayNow()).toBe(true)
  expect(sink.written.sort()).toEqual(['a', 'b', 'c', 'd', 'e'])
  expect(await counted(metrics, 'wardline_audit_replayed_total', 'toggle')).toBe(5)
  expect(await counted(metrics, 'wardline_audit_rejected_total', 'toggle')).toBe(2) // 'poison' and the torn line
  await writer.close()
})
