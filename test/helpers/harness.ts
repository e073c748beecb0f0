import { mkdtempSync, readFileSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { parseConfig } from '../../src/config/load'
import { ConfigError } from '../../src/errors'
import type { Config } from '../../src/config/types'
import type { AuditEntry } from '../../src/audit/entry'
import { silentLogger } from '../../src/log'
import { type GatewayOptions, type RunningGateway, startGateway } from '../../src/server/compose'
import { type ExampleMode, type ExampleServer, startExampleServer } from '../../examples/mcp-server'

export interface Harness {
  readonly gateway: RunningGateway
  readonly upstream: ExampleServer
  /** http://127.0.0.1:<port> of the gateway. */
  readonly url: string
  readonly config: Config
  /** The YAML-shaped tree the config was read from (to build a changed one for a reload). */
  readonly tree: Record<string, unknown>
  readonly auditFile: string
  /** Flushes the audit writer, then reads every entry written so far. */
  audit(): Promise<AuditEntry[]>
  close(): Promise<void>
}

export interface HarnessOptions {
  /** YAML tree merged over the defaults (listen on port 0, upstream = the example server, header auth). */
  readonly config?: Record<string, unknown>
  readonly mode?: ExampleMode
  /** Use this upstream URL instead of starting the example server. */
  readonly upstreamUrl?: string
  readonly env?: NodeJS.ProcessEnv
  /** Options for startGateway (an injected clock); the logger is always silent. */
  readonly gateway?: Omit<GatewayOptions, 'log'>
}

/** A temp directory per call, for audit files and spill files. */
export function tempDir(prefix = 'wardline-test-'): string {
  return mkdtempSync(join(process.env.WARDLINE_TEST_TMP ?? tmpdir(), prefix))
}

/** Builds a validated Config from a YAML-shaped tree, the way an operator's file would be read. */
export function configFrom(tree: Record<string, unknown>, env: NodeJS.ProcessEnv = {}, baseDir = process.cwd()): Config {
  return parseConfig(yaml.dump(tree), { env, baseDir })
}

/** Every problem parseConfig reports for `text` (empty when it is valid). */
export function configProblems(text: string, baseDir = '/srv', env: NodeJS.ProcessEnv = {}): string[] {
  try {
    parseConfig(text, { env, baseDir })
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems]
    throw err
  }
  return []
}

/** Starts the example MCP server and a real gateway in front of it, both on port 0. */
export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const upstream = await startExampleServer({ mode: options.mode ?? 'stateful' })
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const tree = {
    listen: '127.0.0.1:0',
    upstream: options.upstreamUrl ?? upstream.url,
    auth: { mode: 'header' },
    audit: { output: auditFile },
    ...options.config,
  }
  const config = configFrom(tree, options.env ?? {}, dir)
  const gateway = await startGateway(config, { ...options.gateway, log: silentLogger() })
  return {
    gateway,
    upstream,
    url: gateway.url,
    config,
    tree,
    auditFile,
    audit: async () => {
      await gateway.audit.flush()
      return readJsonl(auditFile)
    },
    close: async () => {
      await gateway.shutdown()
      await upstream.close()
    },
  }
}

export function readJsonl(path: string): AuditEntry[] {
  if (!existsSync(path)) return []
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as AuditEntry)
}

/** Headers for header-mode auth. */
export function as(identity: string, tenant = 'acme'): Record<string, string> {
  return { 'x-wardline-identity': identity, 'x-wardline-tenant': tenant }
}

export const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }

export function rpc(method: string, params?: Record<string, unknown>, id: number | string = 1): Record<string, unknown> {
  return params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params }
}

export function toolCall(name: string, args: Record<string, unknown> = {}, id: number | string = 1): Record<string, unknown> {
  return rpc('tools/call', { name, arguments: args }, id)
}

/**
 * The status of one `tools/call` of `echo` sent to a gateway with these headers (its body read and
 * dropped): whether a caller, a token or a revocation lets a call through, and nothing more.
 */
export async function echoStatus(gatewayUrl: string, headers: Record<string, string>): Promise<number> {
  const res = await fetch(`${gatewayUrl}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...headers },
    body: JSON.stringify(toolCall('echo', { text: 'hi' })),
  })
  await res.arrayBuffer()
  return res.status
}

/** One sample of a /metrics text: its labels (unescaped) and value. */
export interface MetricSampleLine {
  readonly labels: Record<string, string>
  readonly value: number
}

/** Every sample of `name` (exactly that name, any labels) in a Prometheus text, labels unescaped. */
export function metricSamples(text: string, name: string): MetricSampleLine[] {
  const out: MetricSampleLine[] = []
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue
    const close = line.lastIndexOf('} ')
    const labels = close < 0 ? {} : labelsOf(line.slice(name.length + 1, close))
    out.push({ labels, value: Number(line.slice(line.lastIndexOf(' ') + 1)) })
  }
  return out
}

/** The labels of a sample as the text writes them between the braces (`a="1",b="x\"y"`), unescaped. */
function labelsOf(body: string): Record<string, string> {
  const labels: Record<string, string> = {}
  for (const m of body.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
    labels[m[1]] = m[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
  return labels
}

/**
 * The value of one sample in a gateway's /metrics text, 0 when absent. `series` names the sample as
 * the text would: `wardline_concurrency_refused_total`, or with its labels,
 * `wardline_requests_total{decision="allow"}`. The labels must be exactly those, in any order: the
 * order the text prints them in, like the order of its series, is not something a scraper reads.
 */
export async function metricSample(gatewayUrl: string, series: string): Promise<number> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text()
  const brace = series.indexOf('{')
  const name = brace < 0 ? series : series.slice(0, brace)
  const wanted = Object.entries(brace < 0 ? {} : labelsOf(series.slice(brace + 1, series.lastIndexOf('}'))))
  const found = metricSamples(text, name).find(
    ({ labels }) => Object.keys(labels).length === wanted.length && wanted.every(([k, v]) => labels[k] === v),
  )
  return found === undefined ? 0 : found.value
}
