/** Worker-thread entry for bench/fixtures.ts: starts one server, posts its URL, stops on 'stop'. */
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { parentPort, workerData } from 'node:worker_threads'
import yaml from 'js-yaml'
import { parseConfig } from '../src/config/load'
import { describeError } from '../src/errors'
import { silentLogger } from '../src/log'
import { startGateway } from '../src/server/compose'
import { startBareForwarder } from './bare-forwarder'
import type { WorkerJob } from './fixtures'

const RESULT = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'ok' }] } }))

async function startUpstream(): Promise<{ url: string; stop(): Promise<void> }> {
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

async function startBenchGateway(upstreamUrl: string, tree: Record<string, unknown>): Promise<{ url: string; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'wardline-bench-'))
  const config = parseConfig(
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: upstreamUrl,
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

async function main(): Promise<void> {
  const job = workerData as WorkerJob
  const port = parentPort
  if (port === null) throw new Error('server-worker must run in a worker thread')
  try {
    const server =
      job.kind === 'upstream'
        ? await startUpstream()
        : job.kind === 'forwarder'
          ? await startBareForwarder(job.upstreamUrl)
          : await startBenchGateway(job.upstreamUrl, job.tree)
    port.once('message', () => {
      // process.exit in a worker ends only this thread; it also ends sockets a section left open.
      void server.stop().finally(() => process.exit(0))
    })
    port.postMessage({ url: server.url })
  } catch (err) {
    port.postMessage({ error: describeError(err) })
  }
}

void main()
