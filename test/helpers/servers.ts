import { join } from 'node:path'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { silentLogger } from '../../src/log'
import { type GatewayOptions, startGateway } from '../../src/server/compose'
import { type Harness, configFrom, readJsonl, tempDir } from './harness'

export interface ServersHarness extends Omit<Harness, 'upstream'> {
  /** The example MCP server started for each server name (each on its own port). */
  readonly upstreams: Readonly<Record<string, ExampleServer>>
}

/**
 * A gateway in front of one example MCP server per name in `servers` (stateful, each on port 0), with
 * `servers:` naming them: each entry's keys are merged over `url` (the example server's /mcp, or its
 * /sse with `transport: sse`). `config` is merged over the rest of the file (header auth, a JSONL audit).
 */
export async function startServersHarness(
  servers: Readonly<Record<string, Record<string, unknown>>>,
  config: Record<string, unknown> = {},
  options: Omit<GatewayOptions, 'log'> = {},
): Promise<ServersHarness> {
  const upstreams: Record<string, ExampleServer> = {}
  const entries: Record<string, Record<string, unknown>> = {}
  for (const [name, entry] of Object.entries(servers)) {
    const upstream = (upstreams[name] = await startExampleServer({ mode: 'stateful' }))
    entries[name] = { url: `${upstream.url}${entry.transport === 'sse' ? '/sse' : '/mcp'}`, ...entry }
  }
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const tree = { listen: '127.0.0.1:0', servers: entries, auth: { mode: 'header' }, audit: { output: auditFile }, ...config }
  const closeUpstreams = (): Promise<unknown> => Promise.all(Object.values(upstreams).map((u) => u.close()))
  let gateway: Awaited<ReturnType<typeof startGateway>>
  let parsed: ServersHarness['config']
  try {
    parsed = configFrom(tree, {}, dir)
    gateway = await startGateway(parsed, { ...options, log: silentLogger() })
  } catch (err) {
    await closeUpstreams()
    throw err
  }
  return {
    gateway,
    upstreams,
    url: gateway.url,
    config: parsed,
    tree,
    auditFile,
    audit: async () => {
      await gateway.audit.flush()
      return readJsonl(auditFile)
    },
    close: async () => {
      await gateway.shutdown()
      await closeUpstreams()
    },
  }
}
