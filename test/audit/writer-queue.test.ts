/**
 * AuditWriter on its own (test/audit/writer.test.ts has more): queueing and batching order, retries,
 * the spill file and its replay, reservations, and close. The sink is a small in-memory implementation
 * of the AuditSink port whose medium is the `kept` array; spill files are real files in a temp dir.
 * Outcomes are read from what the sink kept, the spill files and the writer's callbacks (onDropped,
 * onSpilled, onRejected, onReplayed).
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import type { AuditSink, AuditWriteOptions } from '../../src/audit/sink'
import { AuditSpill } from '../../src/audit/spill'
import { AuditWriter, type AuditWriterOptions } from '../../src/audit/writer'
import { silentLogger } from '../../src/log'
import { readJsonl, tempDir } from '../helpers/harness'
import { auditEntry } from '../helpers/audit-entry'

const entries = (prefix: string, n: number): AuditEntry[] => Array.from({ length: n }, (_, i) => auditEntry(`${prefix}${i}`))
const ids = (list: readonly AuditEntry[]): string[] => list.map((e) => e.request_id)

/** A promise with its resolve at hand. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => undefined
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

/** An AuditSink whose medium is `kept`, and whose failures the test switches on and off. */
class MemorySink implements AuditSink {
  readonly name = 'memory'
  /** The medium: what the sink took, in order. */
  readonly kept: AuditEntry[] = []
  /** Every write's batch (request ids), failed and hung ones included, and the bound it was told. */
  readonly calls: string[][] = []
  readonly timeouts: Array<number | undefined> = []
  /** Writes that fail as an unreachable database does, until set back to false. */
  down = false
  /** The next this-many writes fail, then writes succeed. */
  failNext = 0
  /** Writes never settle (a hung database). */
  hung = false
  /** Request ids the sink refuses for their data (rejects() says true for the error). */
  readonly refused = new Set<string>()
  closed = false
  /** Writes started and not settled when close() was called. */
  inFlightAtClose = -1
  private inFlight = 0
  private gate: Promise<void> | null = null
  private openGate: (() => void) | null = null
  private readonly waiters: Array<{ count: number; resolve: () => void }> = []
  private readonly callWaiters: Array<{ count: number; resolve: () => void }> = []

  /** Holds every write (before it succeeds or fails) until release(). */
  hold(): void {
    const d = deferred()
    this.gate = d.promise
    this.openGate = d.resolve
  }

  release(): void {
    this.gate = null
    this.openGate?.()
  }

  /** Resolves once the sink has kept at least `count` entries. */
  until(count: number): Promise<void> {
    if (this.kept.length >= count) return Promise.resolve()
    return new Promise((resolve) => this.waiters.push({ count, resolve }))
  }

  /** Resolves once write() has been called at least `count` times. */
  calledTimes(count: number): Promise<void> {
    if (this.calls.length >= count) return Promise.resolve()
    return new Promise((resolve) => this.callWaiters.push({ count, resolve }))
  }

  async write(batch: readonly AuditEntry[], options?: AuditWriteOptions): Promise<void> {
    this.calls.push(ids(batch))
    this.timeouts.push(options?.timeoutMs)
    for (const w of this.callWaiters.filter((x) => this.calls.length >= x.count)) w.resolve()
    this.inFlight++
    try {
      if (this.closed) throw new Error('sink is closed')
      if (this.gate !== null) await this.gate
      if (this.hung) await new Promise<never>(() => undefined)
      if (this.down) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
      if (this.failNext > 0) {
        this.failNext--
        throw Object.assign(new Error('connection terminated unexpectedly'), { code: 'ECONNRESET' })
      }
      if (batch.some((e) => this.refused.has(e.request_id))) {
        throw Object.assign(new Error('invalid input syntax for type timestamp'), { code: '22007' })
      }
      this.kept.push(...batch)
      for (const w of this.waiters.filter((x) => this.kept.length >= x.count)) w.resolve()
    } finally {
      this.inFlight--
    }
  }

  rejects(err: unknown): boolean {
    return (err as { code?: unknown } | null)?.code === '22007'
  }

  close(): Promise<void> {
    this.inFlightAtClose = this.inFlight
    this.closed = true
    return Promise.resolve()
  }
}

/** The writer's callbacks, as calls: [count, sink name]. */
interface Heard {
  dropped: Array<[number, string]>
  spilled: Array<[number, string]>
  rejected: Array<[number, string]>
  replayed: Array<[number, string]>
}

function writerFor(sink: AuditSink, options: Partial<AuditWriterOptions> = {}): { writer: AuditWriter; heard: Heard } {
  const heard: Heard = { dropped: [], spilled: [], rejected: [], replayed: [] }
  const writer = new AuditWriter(sink, silentLogger(), {
    maxQueueEntries: 1000,
    retryDelayMs: 1,
    onDropped: (n, name) => heard.dropped.push([n, name]),
    onSpilled: (n, name) => heard.spilled.push([n, name]),
    onRejected: (n, name) => heard.rejected.push([n, name]),
    onReplayed: (n, name) => heard.replayed.push([n, name]),
    ...options,
  })
  return { writer, heard }
}

/** Entries waiting in a spill file, the one being replayed included. */
function spilledIds(spill: AuditSpill): string[] {
  return ids([...readJsonl(spill.replayingPath), ...readJsonl(spill.path)])
}

const freshSpill = (): AuditSpill => new AuditSpill(join(tempDir(), 'spill', 'audit-spill.jsonl'))

describe('queueing and batching', () => {
  test('record() only queues; what is recorded in the same turn goes to the sink as one batch, in order', async () => {
    const sink = new MemorySink()
    const { writer } = writerFor(sink)
    writer.record([auditEntry('a')])
    writer.record([auditEntry('b'), auditEntry('c')])
    writer.record([auditEntry('d')])
    expect(sink.calls).toEqual([]) // nothing written on the request's own turn
    await writer.flush()
    expect(sink.calls).toEqual([['a', 'b', 'c', 'd']])
    expect(ids(sink.kept)).toEqual(['a', 'b', 'c', 'd'])
    await writer.close()
  })

  test('a batch holds at most batchSize entries, and batches follow the recorded order', async () => {
    const sink = new MemorySink()
    const { writer } = writerFor(sink, { batchSize: 3 })
    for (const e of entries('e', 8)) writer.record([e])
    await writer.flush()
    expect(sink.calls).toEqual([
      ['e0', 'e1', 'e2'],
      ['e3', 'e4', 'e5'],
      ['e6', 'e7'],
    ])
    await writer.close()
  })

  test('entries recorded while a batch is being written go in the next batch, after it', async () => {
    const sink = new MemorySink()
    sink.hold()
    const { writer } = writerFor(sink)
    writer.record([auditEntry('first')])
    await sink.calledTimes(1)
    writer.record([auditEntry('second')])
    writer.record([auditEntry('third')])
    sink.release()
    await writer.flush()
    expect(sink.calls).toEqual([['first'], ['second', 'third']])
    expect(ids(sink.kept)).toEqual(['first', 'second', 'third'])
    await writer.close()
  })
})

describe('retrying a failing sink', () => {
  test('a failed batch is retried whole until written, and entries recorded meanwhile wait behind it', async () => {
    const sink = new MemorySink()
    sink.failNext = 2
    const { writer, heard } = writerFor(sink)
    writer.record([auditEntry('a1'), auditEntry('a2')])
    await sink.calledTimes(1) // the first try failed or is failing
    writer.record([auditEntry('b')])
    await writer.flush()
    expect(sink.calls).toEqual([['a1', 'a2'], ['a1', 'a2'], ['a1', 'a2'], ['b']])
    expect(ids(sink.kept)).toEqual(['a1', 'a2', 'b'])
    expect(heard).toEqual({ dropped: [], spilled: [], rejected: [], replayed: [] })
    await writer.close()
  })

  test('with a spill file each try is told what is left of the retry bound', async () => {
    const sink = new MemorySink()
    sink.failNext = 2
    const { writer } = writerFor(sink, { spill: freshSpill(), retryBoundMs: 2000 })
    writer.record([auditEntry('bounded')])
    await writer.flush()
    expect(sink.timeouts).toHaveLength(3)
    for (const t of sink.timeouts) {
      expect(t).toBeGreaterThan(0)
      expect(t).toBeLessThanOrEqual(2000)
    }
    expect(ids(sink.kept)).toEqual(['bounded'])
    await writer.close()
  })
})

describe('the spill file', () => {
  test('after maxAttempts failures a batch is spilled; while the sink is down later batches are spilled without trying it', async () => {
    const sink = new MemorySink()
    sink.down = true
    const spill = freshSpill()
    const { writer, heard } = writerFor(sink, { spill, maxAttempts: 3, retryBoundMs: 10_000, replayIntervalMs: 60_000 })
    writer.record(entries('a', 2))
    await writer.flush()
    expect(sink.calls).toEqual([
      ['a0', 'a1'],
      ['a0', 'a1'],
      ['a0', 'a1'],
    ])
    expect(heard.spilled).toEqual([[2, 'memory']])
    expect(spilledIds(spill)).toEqual(['a0', 'a1'])
    expect(writer.hasSpilled).toBe(true)

    writer.record([auditEntry('b0')])
    await writer.flush()
    expect(sink.calls).toHaveLength(3) // not tried: the sink is known to be down
    expect(heard.spilled).toEqual([
      [2, 'memory'],
      [1, 'memory'],
    ])
    expect(spilledIds(spill)).toEqual(['a0', 'a1', 'b0'])
    expect(heard.dropped).toEqual([])

    // The sink answers again: a replay empties the file into it, oldest first, and new entries go straight in.
    sink.down = false
    expect(await writer.replayNow()).toBe(true)
    expect(ids(sink.kept)).toEqual(['a0', 'a1', 'b0'])
    expect(heard.replayed).toEqual([[3, 'memory']])
    expect(writer.hasSpilled).toBe(false)
    expect(spilledIds(spill)).toEqual([])
    writer.record([auditEntry('c0')])
    await writer.flush()
    expect(sink.calls.at(-1)).toEqual(['c0'])
    expect(ids(sink.kept)).toEqual(['a0', 'a1', 'b0', 'c0'])
    await writer.close()
  })

  test('a replay that finds the sink still down keeps the spill file for the next try', async () => {
    const sink = new MemorySink()
    sink.down = true
    const spill = freshSpill()
    const { writer, heard } = writerFor(sink, { spill, maxAttempts: 1, replayIntervalMs: 60_000 })
    writer.record(entries('k', 3))
    await writer.flush()
    const triesBefore = sink.calls.length
    expect(await writer.replayNow()).toBe(false)
    expect(sink.calls.length).toBeGreaterThan(triesBefore) // the replay did try the sink
    expect(spilledIds(spill)).toEqual(['k0', 'k1', 'k2'])
    expect(heard.replayed).toEqual([])
    sink.down = false
    expect(await writer.replayNow()).toBe(true)
    expect(ids(sink.kept)).toEqual(['k0', 'k1', 'k2'])
    expect(heard.replayed).toEqual([[3, 'memory']])
    await writer.close()
  })

  test('a spilled backlog is replayed on its own once the sink answers again', async () => {
    const sink = new MemorySink()
    sink.down = true
    const spill = freshSpill()
    const { writer } = writerFor(sink, { spill, maxAttempts: 1, replayIntervalMs: 5 })
    writer.record(entries('auto', 4))
    await writer.flush()
    expect(spilledIds(spill)).toHaveLength(4)
    sink.down = false
    await sink.until(4)
    expect(ids(sink.kept)).toEqual(['auto0', 'auto1', 'auto2', 'auto3'])
    expect(await writer.replayNow()).toBe(true)
    await writer.close()
  })

  test('entries an earlier run left in the spill file are replayed at start, before anything is recorded', async () => {
    const spill = freshSpill()
    spill.append(entries('old', 3))
    const sink = new MemorySink()
    const { writer, heard } = writerFor(sink, { spill })
    await sink.until(3)
    expect(ids(sink.kept)).toEqual(['old0', 'old1', 'old2'])
    expect(await writer.replayNow()).toBe(true)
    expect(heard.replayed).toEqual([[3, 'memory']])
    await writer.close()
  })

  test('a spilled entry the sink refuses for its data is quarantined and reported; the rest is replayed', async () => {
    const spill = freshSpill()
    const bad = auditEntry('bad', { timestamp: 'not a time' })
    spill.append([auditEntry('ok1'), bad, auditEntry('ok2')])
    const sink = new MemorySink()
    sink.refused.add('bad')
    const { writer, heard } = writerFor(sink, { spill })
    await sink.until(2)
    expect(await writer.replayNow()).toBe(true)
    expect(ids(sink.kept)).toEqual(['ok1', 'ok2'])
    expect(heard.rejected).toEqual([[1, 'memory']])
    expect(heard.replayed).toEqual([[2, 'memory']])
    expect(readFileSync(spill.rejectedPath, 'utf8')).toBe(JSON.stringify(bad) + '\n')
    await writer.close()
  })
})

describe('reservations', () => {
  test('reserve() says no once queued and reserved entries would pass maxQueueEntries, and then sets nothing aside', async () => {
    const sink = new MemorySink()
    sink.hold()
    const { writer } = writerFor(sink, { maxQueueEntries: 10 })
    expect(writer.reserve(6)).toBe(true)
    expect(writer.reserve(5)).toBe(false)
    expect(writer.reserve(4)).toBe(true)
    expect(writer.reserve(1)).toBe(false)
    writer.release(4)
    expect(writer.reserve(4)).toBe(true) // the refused reserve(5) and reserve(1) held nothing
    expect(writer.reserve(11)).toBe(false)
    writer.release(10)
    sink.release()
    await writer.close()
  })

  test('reserved entries are queued even when the queue is full; unreserved ones are then dropped and reported', async () => {
    const sink = new MemorySink()
    sink.hold()
    const { writer, heard } = writerFor(sink, { maxQueueEntries: 4 })
    writer.record([auditEntry('taken')]) // handed to the held write: no longer in the queue
    await sink.calledTimes(1)
    expect(writer.reserve(2)).toBe(true)
    expect(writer.reserve(2)).toBe(true)
    writer.record([auditEntry('refused-401')]) // nothing reserved and no room beside the reservations
    expect(heard.dropped).toEqual([[1, 'memory']])
    writer.record(entries('r', 2), 2)
    writer.record(entries('s', 2), 2)
    writer.record([auditEntry('late-401')]) // the queue is full now
    expect(heard.dropped).toEqual([
      [1, 'memory'],
      [1, 'memory'],
    ])
    sink.release()
    await writer.flush()
    expect(ids(sink.kept)).toEqual(['taken', 'r0', 'r1', 's0', 's1'])
    await writer.close()
  })

  test('a request that records fewer entries than it reserved gives the rest back', async () => {
    const sink = new MemorySink()
    sink.hold()
    const { writer, heard } = writerFor(sink, { maxQueueEntries: 5 })
    expect(writer.reserve(5)).toBe(true)
    writer.record([auditEntry('refused-batch')], 5) // a refused batch writes one entry of the five
    expect(writer.reserve(4)).toBe(true)
    expect(writer.reserve(1)).toBe(false)
    writer.release(4)
    sink.release()
    await writer.flush()
    expect(ids(sink.kept)).toEqual(['refused-batch'])
    expect(heard.dropped).toEqual([])
    await writer.close()
  })

  test('entries beyond a reservation are queued while there is room, and only they are dropped when there is none', async () => {
    const sink = new MemorySink()
    sink.hold()
    const { writer, heard } = writerFor(sink, { maxQueueEntries: 2 })
    writer.record([auditEntry('taken')])
    await sink.calledTimes(1)
    expect(writer.reserve(1)).toBe(true)
    writer.record([auditEntry('x0'), auditEntry('x1'), auditEntry('x2')], 1)
    expect(heard.dropped).toEqual([[1, 'memory']])
    sink.release()
    await writer.flush()
    expect(ids(sink.kept)).toEqual(['taken', 'x0', 'x1'])
    await writer.close()
  })
})

describe('close', () => {
  test('close writes everything recorded before it, then closes the sink once its last write settled', async () => {
    const sink = new MemorySink()
    sink.failNext = 1
    const { writer, heard } = writerFor(sink, { batchSize: 2 })
    for (const e of entries('c', 5)) writer.record([e])
    await writer.close()
    expect(ids(sink.kept)).toEqual(['c0', 'c1', 'c2', 'c3', 'c4'])
    expect(sink.closed).toBe(true)
    expect(sink.inFlightAtClose).toBe(0)
    expect(heard.dropped).toEqual([])
  })

  test('close with a hung sink and a spill file ends in bounded time, with every entry in the spill file', async () => {
    const sink = new MemorySink()
    sink.hung = true
    const spill = freshSpill()
    const { writer, heard } = writerFor(sink, { spill, retryBoundMs: 200 })
    writer.record(entries('h', 3))
    const started = performance.now()
    await writer.close()
    expect(performance.now() - started).toBeLessThan(2500) // one short try, one short replay: not the sink's forever
    expect(spilledIds(spill)).toEqual(['h0', 'h1', 'h2'])
    expect(heard.spilled).toEqual([[3, 'memory']])
    expect(heard.dropped).toEqual([])
    expect(sink.closed).toBe(true)
  })

  test('close with a hung sink, no spill file and a retry bound gives up after maxAttempts bounded tries, reporting the drop', async () => {
    const sink = new MemorySink()
    sink.hung = true
    const { writer, heard } = writerFor(sink, { retryBoundMs: 50, maxAttempts: 2 })
    writer.record(entries('g', 3))
    const started = performance.now()
    await writer.close()
    expect(performance.now() - started).toBeLessThan(1500)
    expect(sink.calls).toEqual([
      ['g0', 'g1', 'g2'],
      ['g0', 'g1', 'g2'],
    ])
    expect(heard.dropped).toEqual([[3, 'memory']])
  })
})
