/**
 * Servers for the benchmark (bench/servers.ts), each on its own worker thread (its own event loop) so
 * the load generator in the main thread does not share a loop with what it measures.
 */
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { type BenchContext, type LoadResult, runLoad } from './load'
import type { ServerJob } from './servers'

export interface BenchServer {
  /** http://127.0.0.1:<port> */
  readonly url: string
  close(): Promise<void>
}

/** Starts the trivial upstream on port 0 in a worker thread. */
export function startRawUpstream(): Promise<BenchServer> {
  return startWorker({ kind: 'upstream' })
}

/**
 * A gateway on 127.0.0.1:0 in front of `upstreamUrl` in a worker thread: header auth, audit to a temp
 * JSONL file (removed on close), log_level error. `tree` is merged over those defaults (a top-level key
 * replaces the default one), so a section can turn on budget, policy, postgres or jwt auth.
 */
export function startBenchGateway(upstreamUrl: string, tree: Record<string, unknown> = {}): Promise<BenchServer> {
  return startWorker({ kind: 'gateway', upstreamUrl, tree })
}

function startWorker(job: ServerJob): Promise<BenchServer> {
  return startBenchWorker('server-worker.js', job, job.kind)
}

/**
 * A server in a worker thread (`file`, compiled beside this one in dist/bench/): it posts `{ url }` (or
 * `{ error }`) once listening and exits on 'stop'.
 */
export function startBenchWorker(file: string, workerData: unknown, what: string): Promise<BenchServer> {
  const worker = new Worker(join(__dirname, file), { workerData })
  return new Promise((resolve, reject) => {
    worker.once('error', reject)
    worker.once('message', (msg: { url?: string; error?: string }) => {
      if (msg.error !== undefined || msg.url === undefined) {
        void worker.terminate()
        reject(new Error(`bench ${what} did not start: ${msg.error ?? 'no url'}`))
        return
      }
      resolve({
        url: msg.url,
        close: () =>
          new Promise<void>((done) => {
            worker.once('exit', () => done())
            worker.postMessage('stop')
          }),
      })
    })
  })
}

/** A tools/call body and the header-auth headers every bench request sends. */
export const TOOL_CALL_BODY = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'tools/call',
  params: { name: 'echo', arguments: { text: 'hi' } },
})

export function benchHeaders(identity = 'bench', tenant = 'acme'): Record<string, string> {
  return {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'x-wardline-identity': identity,
    'x-wardline-tenant': tenant,
  }
}

/**
 * The standard measured call: a tools/call POST to `<base>/mcp`, for as long as one round of `ctx`,
 * after a short warm-up. Returns a factory per gateway so `interleave` can alternate them.
 */
export function toolCallLoad(
  ctx: BenchContext,
  headers: Record<string, string> = benchHeaders(),
): (base: string) => () => Promise<LoadResult> {
  return (base) => () =>
    runLoad({
      url: `${base}/mcp`,
      method: 'POST',
      headers,
      body: TOOL_CALL_BODY,
      concurrency: ctx.concurrency,
      durationMs: ctx.roundMs,
      warmupMs: 300,
    })
}
