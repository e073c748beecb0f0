/**
 * The servers the benchmark measures, started in whatever thread or process runs this: a trivial
 * upstream that answers every request with one JSON-RPC result (the figures measure the proxy, not an
 * MCP server), the bare forwarder, and a real gateway built from a YAML-shaped config tree exactly as an
 * operator's file would be read. bench/server-worker.ts runs them on worker threads, bench/server-process.ts
 * in child processes of their own (the core section, which reads their CPU time).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { parseConfig } from '../src/config/load'
import { silentLogger } from '../src/log'
import { startGateway } from '../src/server/compose'
import { startBareForwarder } from './bare-forwarder'

/** What a bench server thread or process is asked to start. */
export type ServerJob =
  | { readonly kind: 'upstream' }
  | { readonly kind: 'gateway'; readonly upstreamUrl: string; readonly tree: Record<string, unknown> }
  | { readonly kind: 'forwarder'; readonly upstreamUrl: string }

export interface StartedServer {
  readonly url: string
  stop(): Promise<void>
}

export function startServer(job: ServerJob): Promise<StartedServer> {
  if (job.kind === 'upstream') return startUpstream()
  if (job.kind === 'forwarder') return startBareForwarder(job.upstreamUrl)
  return startGatewayFromTree(job.upstreamUrl, job.tree)
}

const RESULT = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'ok' }] } }))

async function startUpstream(): Promise<StartedServer> {
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': RESULT.length })
      res.end(RESULT)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/**
 * Header auth, audit to a temp JSONL file (removed on stop), log_level error; `tree` is merged over
 * those defaults (a top-level key replaces the default one). A tree naming `servers` has no `upstream`
 * (the two never go together).
 */
async function startGatewayFromTree(upstreamUrl: string, tree: Record<string, unknown>): Promise<StartedServer> {
  const dir = mkdtempSync(join(tmpdir(), 'wardline-bench-'))
  const config = parseConfig(
    yaml.dump({
      listen: '127.0.0.1:0',
      ...('servers' in tree ? {} : { upstream: upstreamUrl }),
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      log_level: 'error',
      ...tree,
    }),
    { env: process.env, baseDir: dir },
  )
  const gateway = await startGateway(config, { log: silentLogger() })
  return {
    url: gateway.url,
    stop: async () => {
      await gateway.shutdown()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
