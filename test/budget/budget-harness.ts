import { join } from 'node:path'
import { Writable } from 'node:stream'
import winston from 'winston'
import type { AuditEntry } from '../../src/audit/entry'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import type { BudgetStore } from '../../src/budget/store'
import type { Logger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { type ExampleMode, type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { MCP_HEADERS, as, configFrom, readJsonl, tempDir } from '../helpers/harness'

/** A clock the test moves instead of sleeping. */
export function manualClock(): { now: () => number; advance: (seconds: number) => void } {
  let ms = 1_000_000
  return { now: () => ms, advance: (seconds) => void (ms += seconds * 1000) }
}

type LogLine = { level: string; message: string } & Record<string, unknown>

/** A winston logger that keeps every line it is given, for asserting on startup notices. */
export function capturingLogger(): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as LogLine)
      done()
    },
  })
  const log = winston.createLogger({
    level: 'debug',
    format: winston.format.json(),
    transports: [new winston.transports.Stream({ stream })],
  })
  return { log, lines }
}

export interface BudgetHarness {
  readonly gateway: RunningGateway
  readonly upstream: ExampleServer
  readonly url: string
  readonly advance: (seconds: number) => void
  readonly logs: ReturnType<typeof capturingLogger>['lines']
  /** Reloads with this budget (and the harness's other keys), as SIGHUP would; returns the keys needing a restart. */
  reload(budget: Record<string, unknown>): string[]
  audit(): Promise<AuditEntry[]>
  /** POSTs a JSON-RPC body to /mcp as (identity, tenant). */
  post(body: unknown, identity?: string, tenant?: string): Promise<Reply>
  close(): Promise<void>
}

export interface Reply {
  readonly status: number
  readonly headers: Headers
  /** The parsed body (null when empty); tests give it the JSON-RPC shape they assert on. */
  readonly json: unknown
}

/**
 * The example MCP server (stateless JSON: every POST stands alone) and a real gateway on port 0,
 * with header auth and budget enforcement on, counting in a real MemoryBudgetStore on a manual clock
 * (or in the store given).
 */
export async function startBudgetHarness(
  options: {
    budget?: Record<string, unknown>
    features?: Record<string, unknown>
    /** The store to count in, or a maker given the harness's manual clock (ms) to judge windows on. */
    store?: BudgetStore | ((now: () => number) => BudgetStore)
    mode?: ExampleMode
    /** More top-level config keys (a policy, say). */
    config?: Record<string, unknown>
  } = {},
): Promise<BudgetHarness> {
  const upstream = await startExampleServer({ mode: options.mode ?? 'stateless-json' })
  const dir = tempDir('wardline-budget-')
  const auditFile = join(dir, 'audit.jsonl')
  const tree: Record<string, unknown> = {
    listen: '127.0.0.1:0',
    upstream: upstream.url,
    auth: { mode: 'header' },
    audit: { output: auditFile },
    features: options.features ?? { budget_enforcement: true },
  }
  if (options.budget !== undefined) tree.budget = options.budget
  Object.assign(tree, options.config)
  const config = configFrom(tree, {}, dir)
  const clock = manualClock()
  const { log, lines } = capturingLogger()
  const store = typeof options.store === 'function' ? options.store(clock.now) : options.store
  const gateway = await startGateway(config, { log, budgetStore: store ?? new MemoryBudgetStore({ now: clock.now }) })
  return {
    gateway,
    upstream,
    url: gateway.url,
    advance: clock.advance,
    logs: lines,
    reload: (budget) => gateway.reload(configFrom({ ...tree, budget }, {}, dir)),
    audit: async () => {
      await gateway.audit.flush()
      return readJsonl(auditFile)
    },
    post: async (body, identity = 'alice', tenant = 'acme') => {
      const res = await fetch(`${gateway.url}/mcp`, {
        method: 'POST',
        headers: { ...as(identity, tenant), ...MCP_HEADERS },
        body: JSON.stringify(body),
      })
      const text = await res.text()
      return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null }
    },
    close: async () => {
      await gateway.shutdown()
      await upstream.close()
    },
  }
}
