/** Worker-thread entry for bench/fixtures.ts: starts one server (bench/servers.ts), posts its URL, stops on 'stop'. */
import { parentPort, workerData } from 'node:worker_threads'
import { describeError } from '../src/errors'
import { type ServerJob, startServer } from './servers'

async function main(): Promise<void> {
  const port = parentPort
  if (port === null) throw new Error('server-worker must run in a worker thread')
  try {
    const server = await startServer(workerData as ServerJob)
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
