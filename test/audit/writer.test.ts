import { mkdirSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { JsonlAuditSink } from '../../src/audit/jsonl-sink'
import type { AuditSink } from '../../src/audit/sink'
import { AuditSpill } from '../../src/audit/spill'
import { AuditWriter } from '../../src/audit/writer'
import { silentLogger } from '../../src/log'
import { readJsonl, tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { auditEntry } from '../helpers/audit-entry'

const entries = (prefix: string, n: number): AuditEntry[] => Array.from({ length: n }, (_, i) => auditEntry(`${prefix}${i}`))

/**
 * A real JSONL sink behind a switch the test controls: writes fail (as on a full disk) or wait (as on
 * a stalled one) until told otherwise. A test double of the AuditSink port, not of our writer.
 */
class ControlledSink implements AuditSink {
  readonly name = 'controlled'
  failures = 0
  calls = 0
  onCall: ((n: number) => void) | null = null
  private gate: Promise<void> | null = null
  private openGate: (() => void) | null = null
  constructor(
    private readonly inner: AuditSink,
    public failing: number,
  ) {}

  hold(): void {
    this.gate = new Promise((resolve) => (this.openGate = resolve))
  }
  release(): void {
    this.openGate?.()
    this.gate = null
  }
  async write(batch: readonly AuditEntry[]): Promise<void> {
    this.calls++
    this.onCall?.(this.calls)
    if (this.gate !== null) await this.gate
    if (this.failing > 0) {
      this.failing--
      this.failures++
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
    }
    await this.inner.write(batch)
  }
  close(): Promise<void> {
    return this.inner.close()
  }
}

async function jsonl(): Promise<{ path: string; sink: JsonlAuditSink }> {
  const path = join(tempDir(), 'audit.jsonl')
  return { path, sink: await JsonlAuditSink.open(path) }
}

describe('the audit writer keeps what it accepted', () => {
  test('without a spill file, a batch the sink keeps failing is retried until written, never dropped', async () => {
    const { path, sink } = await jsonl()
    const flaky = new ControlledSink(sink, 8) // past maxAttempts (5): a bound that must not drop the batch
    let dropped = 0
    const writer = new AuditWriter(flaky, silentLogger(), { maxQueueEntries: 100, retryDelayMs: 1, onDropped: (n) => (dropped += n) })
    writer.record(entries('a', 3))
    await writer.flush()
    expect(flaky.failures).toBe(8)
    expect(dropped).toBe(0)
    expect(readJsonl(path).map((e) => e.request_id)).toEqual(['a0', 'a1', 'a2'])
    await writer.close()
  })

  test('while closing, a sink that keeps failing gets a bounded number of tries and the rest is counted as dropped', async () => {
    const { sink } = await jsonl()
    const dead = new ControlledSink(sink, Infinity)
    const dropped: number[] = []
    const writer = new AuditWriter(dead, silentLogger(), { maxQueueEntries: 100, retryDelayMs: 1, onDropped: (n) => dropped.push(n) })
    // The shutdown starts after a few failed tries (without a spill file those go on for as long as it takes).
    const closed = new Promise<void>((resolve) => {
      dead.onCall = (n) => {
        if (n === 3) resolve(writer.close())
      }
    })
    writer.record(entries('a', 2))
    await closed
    expect(dead.calls).toBeLessThanOrEqual(3 + 5)
    expect(dropped).toEqual([2])
  })

  test('reserved entries are queued whatever the queue length; unreserved ones only while there is room', async () => {
    const { path, sink } = await jsonl()
    const stalled = new ControlledSink(sink, 0)
    stalled.hold()
    let dropped = 0
    const writer = new AuditWriter(stalled, silentLogger(), { maxQueueEntries: 100, onDropped: (n) => (dropped += n) })
    writer.record([auditEntry('first')]) // taken by the (held) write
    await waitFor(() => stalled.calls === 1, { what: 'the first entry to reach the held write' })
    expect(writer.pending).toBe(0)

    expect(writer.reserve(60)).toBe(true)
    expect(writer.reserve(40)).toBe(true)
    expect(writer.reserve(1)).toBe(false) // 0 queued + 100 reserved: full
    writer.record([auditEntry('unreserved')]) // a 401, say: no room beside the reservations
    expect(dropped).toBe(1)

    writer.record(entries('r', 60), 60) // a forwarded batch uses all its slots
    writer.record([auditEntry('refused')], 40) // a refused request writes 1 of its 40 and releases the rest
    expect(writer.pending).toBe(61)
    expect(writer.reservedEntries).toBe(0)
    expect(writer.reserve(40)).toBe(false) // 61 + 40 > 100
    expect(writer.reserve(39)).toBe(true)
    writer.release(39)

    stalled.release()
    await writer.flush()
    const ids = readJsonl(path).map((e) => e.request_id)
    expect(ids).toEqual(['first', ...entries('r', 60).map((e) => e.request_id), 'refused'])
    expect(dropped).toBe(1)
    await writer.close()
  })

  test('when the spill file cannot be written either, the batch is held and retried, not dropped', async () => {
    const dir = tempDir()
    const blocker = join(dir, 'spill')
    writeFileSync(blocker, '') // a file where the spill directory should be: every append fails (ENOTDIR)
    const spill = new AuditSpill(join(blocker, 'audit-spill.jsonl'))
    const { sink } = await jsonl()
    const down = new ControlledSink(sink, Infinity) // the database is down throughout
    // Once the writer has given up on the sink and failed to spill at least once, the disk is fixed.
    down.onCall = (n) => {
      if (n === 8) {
        unlinkSync(blocker)
        mkdirSync(blocker)
      }
    }
    let dropped = 0
    const writer = new AuditWriter(down, silentLogger(), {
      maxQueueEntries: 100,
      retryDelayMs: 1,
      retryBoundMs: 10_000,
      spill,
      onDropped: (n) => (dropped += n),
    })
    writer.record(entries('s', 3))
    await writer.flush()
    expect(dropped).toBe(0)
    expect(readJsonl(spill.path).map((e) => e.request_id)).toEqual(['s0', 's1', 's2'])
    await writer.close()
  })
})

describe('the audit writer gathers entries into batches', () => {
  const record = (writer: AuditWriter, prefix: string, n: number): void => {
    for (const e of entries(prefix, n)) writer.record([e])
  }

  test('entries recorded over several event-loop turns within the interval go to the sink in one write', async () => {
    const { path, sink } = await jsonl()
    const counted = new ControlledSink(sink, 0)
    const writer = new AuditWriter(counted, silentLogger(), { maxQueueEntries: 1000, gatherMs: 200 })
    for (let turn = 0; turn < 5; turn++) {
      record(writer, `t${turn}-`, 3)
      await new Promise<void>((resolve) => setImmediate(resolve))
    }
    await writer.flush()
    expect(counted.calls).toBe(1)
    const expected = [0, 1, 2, 3, 4].flatMap((t) => entries(`t${t}-`, 3))
    expect(readJsonl(path).map((e) => e.request_id)).toEqual(expected.map((e) => e.request_id))
    await writer.close()
  })

  test('a full batch is written at once, without waiting out the interval', async () => {
    const { path, sink } = await jsonl()
    const counted = new ControlledSink(sink, 0)
    // An hour's interval: only a full batch (or close) can end the wait.
    const writer = new AuditWriter(counted, silentLogger(), { maxQueueEntries: 1000, batchSize: 10, gatherMs: 3_600_000 })
    record(writer, 'a', 4)
    await new Promise<void>((resolve) => setImmediate(resolve))
    expect(counted.calls).toBe(0)
    record(writer, 'b', 6)
    await waitFor(() => counted.calls === 1, { what: 'the full batch to be written' })
    await waitFor(() => readJsonl(path).length === 10, { what: 'its 10 lines in the file' })
    // And close() does not wait out the interval either.
    record(writer, 'c', 1)
    await writer.close()
    expect(readJsonl(path)).toHaveLength(11)
  })

  test('gatherMs 0 writes after the turn that recorded the entries', async () => {
    const { path, sink } = await jsonl()
    const writer = new AuditWriter(sink, silentLogger(), { maxQueueEntries: 1000, gatherMs: 0 })
    record(writer, 'z', 2)
    await writer.flush()
    expect(readJsonl(path)).toHaveLength(2)
    await writer.close()
  })
})
