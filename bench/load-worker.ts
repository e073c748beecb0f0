/**
 * Worker-thread entry for `runLoadInWorker`: runs one load on its own event loop and posts the result,
 * so a heavy load (megabyte bodies) does not slow the generator measuring another caller's latency.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { type LoadOptions, runLoad } from './load'

const options = workerData as LoadOptions
void runLoad(options).then(
  (result) => parentPort?.postMessage({ result }),
  (err: unknown) => parentPort?.postMessage({ error: String(err) }),
)
