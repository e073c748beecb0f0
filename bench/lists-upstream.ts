/**
 * Worker-thread entry for bench/lists.ts: an upstream that answers a tools/list with the list it was
 * given (as JSON on /mcp, as one SSE event on /mcp-sse, the way an SDK server in SSE mode does) and
 * any other request with the trivial tools/call result of the core bench. Posts its URL, stops on 'stop'.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parentPort, workerData } from 'node:worker_threads'

/** What bench/lists.ts hands the worker: the whole JSON answer to a tools/list. */
export interface ListUpstreamJob {
  readonly listAnswer: string
}

const RESULT = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'ok' }] } }))
const LIST_METHOD = Buffer.from('"tools/list"')

async function main(): Promise<void> {
  const port = parentPort
  if (port === null) throw new Error('lists-upstream must run in a worker thread')
  const { listAnswer } = workerData as ListUpstreamJob
  const json = Buffer.from(listAnswer)
  const sse = Buffer.from(`event: message\ndata: ${listAnswer}\n\n`)
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      // A byte search, not a parse: the upstream's own cost must stay small beside what is measured.
      if (Buffer.concat(chunks).indexOf(LIST_METHOD) === -1) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': RESULT.length })
        res.end(RESULT)
      } else if (req.url === '/mcp-sse') {
        // No content-length: an SDK server streams its SSE answer chunked.
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
        res.end(sse)
      } else {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': json.length })
        res.end(json)
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port: listening } = server.address() as AddressInfo
  port.once('message', () => {
    server.closeAllConnections()
    server.close(() => process.exit(0))
  })
  port.postMessage({ url: `http://127.0.0.1:${listening}` })
}

void main()
