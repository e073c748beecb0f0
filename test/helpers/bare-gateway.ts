/**
 * A gateway made of the stages a test chooses, on the real Lifecycle and Gateway, listening on port 0
 * and auditing to a JSONL file: for tests that put a stage of their own (one that throws, one that
 * reads the answer) in front of a real upstream, where the shipped chain would not have it.
 */
import { join } from 'node:path'
import { AuditMetrics } from '../../src/audit/metrics'
import { AuditTrail } from '../../src/audit/trail'
import { AuditWriter } from '../../src/audit/writer'
import { JsonlAuditSink } from '../../src/audit/jsonl-sink'
import type { Config } from '../../src/config/types'
import { silentLogger } from '../../src/log'
import type { Stage } from '../../src/pipeline/stage'
import { Gateway } from '../../src/server/gateway'
import { Lifecycle } from '../../src/server/lifecycle'
import { Upstream } from '../../src/upstream/forward'
import { configFrom, tempDir } from './harness'

export interface BareGateway {
  readonly url: string
  readonly auditFile: string
  readonly lifecycle: Lifecycle
  readonly gateway: Gateway
  /** Shuts the gateway down (its audit trail flushed); the upstream is the caller's to close. */
  close(): Promise<void>
}

export async function startBareGateway(options: {
  readonly upstreamUrl: string
  /** Top-level config keys besides listen, upstream and header-mode auth. */
  readonly config?: Record<string, unknown>
  readonly metrics?: AuditMetrics
  readonly stages: (config: Config, audit: AuditTrail) => Stage[]
}): Promise<BareGateway> {
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const config = configFrom({ listen: '127.0.0.1:0', upstream: options.upstreamUrl, auth: { mode: 'header' }, ...options.config }, {}, dir)
  const audit = new AuditTrail(
    [new AuditWriter(await JsonlAuditSink.open(auditFile), silentLogger(), { maxQueueEntries: 10_000 })],
    options.metrics ?? new AuditMetrics(),
  )
  const relay = new Upstream(config.upstream!)
  const gateway = new Gateway(options.stages(config, audit), relay, audit, silentLogger())
  const lifecycle = new Lifecycle(config, {
    gateway,
    routes: { handle: () => false, handleMonitoring: () => false },
    audit,
    log: silentLogger(),
    closers: [() => relay.destroy()],
    applyReload: () => [],
  })
  const url = await lifecycle.start()
  return { url, auditFile, lifecycle, gateway, close: () => lifecycle.shutdown() }
}
