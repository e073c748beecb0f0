/**
 * Child-process entry for the core bench (bench/speed.ts): starts one server (bench/servers.ts) from
 * the job in argv[2], sends its URL over IPC, and answers 'sample' with this process's counters so the
 * parent can charge each measured round its CPU time, allocation and GC pauses. 'stop' ends it.
 *
 * A process of its own, not a worker thread: CPU time, heap and GC are per process, and a process can
 * be pinned to a core of its own (taskset) away from the load generator.
 */
import { GCProfiler, getHeapStatistics } from 'node:v8'
import { describeError } from '../src/errors'
import { type ServerJob, startServer } from './servers'

/** Cumulative since the process started; the parent subtracts two samples. */
export interface ProcessSample {
  /** User + system CPU time of the whole process (its threads included), µs. */
  readonly cpuUs: number
  /** Bytes allocated on the V8 heap (estimated from the heap size before and after each GC). */
  readonly allocatedBytes: number
  /** Time spent in GC pauses, µs. */
  readonly gcPauseUs: number
  readonly gcCount: number
}

interface GcStatistic {
  readonly cost: number
  readonly beforeGC: { readonly heapStatistics: { readonly usedHeapSize: number } }
  readonly afterGC: { readonly heapStatistics: { readonly usedHeapSize: number } }
}

let profiler = new GCProfiler()
profiler.start()
let usedAtLastSample = getHeapStatistics().used_heap_size
let allocatedBytes = 0
let gcPauseUs = 0
let gcCount = 0

/**
 * V8 counts no allocated bytes, so they are read off the heap: what grew between one GC's end and the
 * next one's start, plus the growth since the last GC. The profiler is restarted per sample to read
 * the GCs since the last one.
 */
function sample(): ProcessSample {
  const statistics = (profiler.stop() as { statistics: GcStatistic[] } | undefined)?.statistics ?? []
  profiler = new GCProfiler()
  profiler.start()
  let after = usedAtLastSample
  for (const gc of statistics) {
    allocatedBytes += Math.max(0, gc.beforeGC.heapStatistics.usedHeapSize - after)
    after = gc.afterGC.heapStatistics.usedHeapSize
    gcPauseUs += gc.cost
    gcCount++
  }
  const used = getHeapStatistics().used_heap_size
  allocatedBytes += Math.max(0, used - after)
  usedAtLastSample = used
  const cpu = process.cpuUsage()
  return { cpuUs: cpu.user + cpu.system, allocatedBytes, gcPauseUs, gcCount }
}

async function main(): Promise<void> {
  const send = (message: unknown): void => {
    process.send?.(message)
  }
  try {
    const server = await startServer(JSON.parse(process.argv[2]) as ServerJob)
    process.on('message', (message: string) => {
      if (message === 'sample') send({ sample: sample() })
      else if (message === 'stop') void server.stop().finally(() => process.exit(0))
    })
    // The parent gone (a bench that died): do not linger.
    process.on('disconnect', () => process.exit(0))
    send({ url: server.url })
  } catch (err) {
    send({ error: describeError(err) })
    process.exit(1)
  }
}

void main()
