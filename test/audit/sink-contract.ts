import type { AuditEntry } from '../../src/audit/entry'
import type { AuditSink } from '../../src/audit/sink'
import { auditEntry } from '../helpers/audit-entry'

/**
 * What an implementation promises beyond the part of the AuditSink contract every sink shares. The
 * port leaves these open, so each sink says which it does, and the suite checks it does exactly that.
 */
export interface SinkCapabilities {
  /**
   * What the medium holds after the same entry was written twice (a batch retried after a write that
   * may have landed, a spill replay). The port asks only that the sink tolerate it: 'once' for a sink
   * that dedupes on request_id, 'twice' for one that appends both copies, each intact.
   */
  readonly retriedEntry: 'once' | 'twice'
  /** True when a write after close() rejects (a file sink); false when the port's silence is used (a shared pool). */
  readonly refusesWritesAfterClose: boolean
  /** 'rotates': reopen() follows a rename of its path; 'no-op': it has reopen() but nothing to reopen; 'absent'. */
  readonly reopen: 'rotates' | 'no-op' | 'absent'
  /** True when the sink has rejects(), telling data it can never store from an unavailable medium. */
  readonly rejects: boolean
  /**
   * 'handles': the sink owns OS handles on its medium (an open file) that close() must release, and the
   * fixture counts them; 'nothing': it owns none (a pool closed by compose.ts, the process's stdout).
   */
  readonly holds: 'handles' | 'nothing'
}

/** A sink under test, and the medium it writes to, read the way someone outside the gateway reads it. */
export interface SinkFixture {
  readonly sink: AuditSink
  /** Every entry the medium holds now, in the medium's order (file lines, table rows by insertion). */
  readonly readBack: () => Promise<AuditEntry[]>
  /** With reopen 'rotates': renames the medium away as logrotate does; returns a reader of the renamed copy. */
  readonly rotate?: () => Promise<() => Promise<AuditEntry[]>>
  /** With rejects: an entry the sink refuses for its data. */
  readonly refusedEntry?: AuditEntry
  /** With rejects: the error a sink of this kind gives when its medium is unreachable. */
  readonly unavailableError?: () => Promise<unknown>
  /** With holds 'handles': how many OS handles the process has open on the medium now (fds on a file). */
  readonly handles?: () => number
  /** Called after each test, after sink.close(). */
  readonly cleanup?: () => Promise<void>
}

const ids = (entries: readonly AuditEntry[]): string[] => entries.map((e) => e.request_id)

/**
 * The AuditSink contract (src/audit/sink.ts), run by every implementation with its own fixture: entries
 * are kept in the order written, a write that resolved is readable from the medium at once, an entry
 * written twice is tolerated, close releases after the last write, reopen() and rejects() (where a sink
 * has them) do what the port says. Each test gets a fresh fixture and an empty medium.
 */
export function auditSinkContract(label: string, capabilities: SinkCapabilities, open: () => Promise<SinkFixture>): void {
  describe(`AuditSink contract: ${label}`, () => {
    let fx: SinkFixture
    let sink: AuditSink
    let closed: boolean

    beforeEach(async () => {
      fx = await open()
      sink = fx.sink
      closed = false
    })

    afterEach(async () => {
      if (!closed) await sink.close()
      await fx.cleanup?.()
    })

    const close = async (): Promise<void> => {
      closed = true
      await sink.close()
    }

    test('the capabilities declared for this sink match the methods it has', () => {
      expect(typeof sink.name).toBe('string')
      expect(sink.name.length).toBeGreaterThan(0)
      expect(typeof sink.reopen === 'function').toBe(capabilities.reopen !== 'absent')
      expect(typeof sink.rejects === 'function').toBe(capabilities.rejects)
      if (capabilities.reopen === 'rotates') expect(fx.rotate).toBeDefined()
      if (capabilities.holds === 'handles') expect(fx.handles).toBeDefined()
      if (capabilities.rejects) {
        expect(fx.refusedEntry).toBeDefined()
        expect(fx.unavailableError).toBeDefined()
      }
    })

    test('entries are kept field for field, in the order written, across batches', async () => {
      const batches = [
        [auditEntry('a'), auditEntry('b', { decision: 'deny', status: 403, reason: 'policy rule 2' }), auditEntry('c')],
        [auditEntry('d', { session_id: 'session-1' })],
        [auditEntry('e', { method: 'tools/list', tool: '', decision: 'passthrough' }), auditEntry('f', { latency_ms: 0.001 })],
      ]
      for (const batch of batches) await sink.write(batch)
      expect(await fx.readBack()).toEqual(batches.flat())
    })

    test('a write that resolved is in the medium already: nothing waits in the sink for a later flush', async () => {
      const written: AuditEntry[] = []
      for (let i = 0; i < 5; i++) {
        const batch = [auditEntry(`durable-${i}-a`), auditEntry(`durable-${i}-b`)]
        await sink.write(batch)
        written.push(...batch)
        expect(ids(await fx.readBack())).toEqual(ids(written))
      }
    })

    test('an empty batch resolves and writes nothing', async () => {
      await sink.write([])
      await sink.write([auditEntry('only')])
      await sink.write([])
      expect(ids(await fx.readBack())).toEqual(['only'])
    })

    test('a batch written a second time (a retry) is tolerated as the sink declares', async () => {
      const batch = [auditEntry('r-1'), auditEntry('r-2'), auditEntry('r-3')]
      await sink.write(batch)
      await sink.write(batch)
      await sink.write([auditEntry('r-4')])
      const expected = capabilities.retriedEntry === 'once' ? [...batch, auditEntry('r-4')] : [...batch, ...batch, auditEntry('r-4')]
      expect(await fx.readBack()).toEqual(expected)
    })

    test('a retry overlapping the batch before it keeps every entry, the repeated one as the sink declares', async () => {
      await sink.write([auditEntry('o-1'), auditEntry('o-2')])
      await sink.write([auditEntry('o-2'), auditEntry('o-3')])
      expect(ids(await fx.readBack())).toEqual(capabilities.retriedEntry === 'once' ? ['o-1', 'o-2', 'o-3'] : ['o-1', 'o-2', 'o-2', 'o-3'])
    })

    test('the same entry twice inside one batch (a replayed spill file can hold both copies) is tolerated as declared', async () => {
      await sink.write([auditEntry('t-1'), auditEntry('t-2'), auditEntry('t-1'), auditEntry('t-3')])
      expect(ids(await fx.readBack())).toEqual(capabilities.retriedEntry === 'once' ? ['t-1', 't-2', 't-3'] : ['t-1', 't-2', 't-1', 't-3'])
    })

    test('odd but legal data reads back exactly: Unicode, line separators, quotes, a 1 MiB reason, empty fields', async () => {
      const odd = [
        auditEntry('unicode-é-日本-😀', {
          identity: 'José Müller',
          tenant: '東京',
          tool: 'e\u0301moji 😀 \u200b zero-width, שלום',
          reason: 'combining e\u0301 and astral 𝄞',
        }),
        // JSON.stringify leaves U+2028/U+2029 raw; line-splitting readers (Python's splitlines) break on them.
        auditEntry('separators', { tool: 'evil\u2028{"decision":"allow"}\u2029x', method: 'tools/\u2028call', reason: 'a\u2029b' }),
        auditEntry('controls-and-quotes', {
          reason: 'line\nbreak\r\nand\ttab, "quotes", back\\slash',
          tool: "'); DROP TABLE audit_entries; --",
        }),
        auditEntry('long-reason', { reason: 'r'.repeat(1024 * 1024) }),
        // A request refused before auth: identity, tenant and tool empty; no reason, no session.
        auditEntry('empty-fields', { identity: '', tenant: '', method: 'GET', tool: '', decision: 'unauthorized', status: 401 }),
        auditEntry('empty-reason', { reason: '', session_id: '' }),
        auditEntry('numbers', { status: 499, latency_ms: 123456.789 }),
      ]
      await sink.write(odd)
      expect(await fx.readBack()).toEqual(odd)
    })

    test('a large batch is written whole and in order', async () => {
      const batch = Array.from({ length: 5000 }, (_, i) => auditEntry(`big-${i}`, { latency_ms: i / 7 }))
      await sink.write(batch)
      expect(await fx.readBack()).toEqual(batch)
    })

    test('close resolves after the last write settled, and everything written stays in the medium', async () => {
      await sink.write([auditEntry('before-close-1')])
      await sink.write([auditEntry('before-close-2')])
      await close()
      expect(ids(await fx.readBack())).toEqual(['before-close-1', 'before-close-2'])
    })

    if (capabilities.holds === 'handles') {
      test('close releases what the sink holds on its medium', async () => {
        const handles = fx.handles as () => number
        await sink.write([auditEntry('held')])
        expect(handles()).toBeGreaterThan(0)
        await close()
        expect(handles()).toBe(0)
      })
    }

    if (capabilities.refusesWritesAfterClose) {
      test('a write after close rejects and reaches no medium', async () => {
        await sink.write([auditEntry('in-time')])
        await close()
        await expect(sink.write([auditEntry('too-late')])).rejects.toThrow()
        expect(ids(await fx.readBack())).toEqual(['in-time'])
      })
    }

    if (capabilities.reopen !== 'absent') {
      test('reopen() with nothing renamed loses nothing and repeats nothing', async () => {
        await sink.write([auditEntry('x-1')])
        sink.reopen?.()
        await sink.write([auditEntry('x-2')])
        sink.reopen?.()
        sink.reopen?.()
        await sink.write([auditEntry('x-3'), auditEntry('x-4')])
        expect(ids(await fx.readBack())).toEqual(['x-1', 'x-2', 'x-3', 'x-4'])
      })
    }

    if (capabilities.reopen === 'rotates') {
      test('after a rename, reopen() sends the next write to a fresh medium at the path; the renamed one keeps the rest', async () => {
        await sink.write([auditEntry('old-1')])
        const rotated = await (fx.rotate as () => Promise<() => Promise<AuditEntry[]>>)()
        await sink.write([auditEntry('old-2')]) // before the reopen: follows the handle into the renamed file
        sink.reopen?.()
        await sink.write([auditEntry('new-1')])
        await sink.write([auditEntry('new-2')])
        expect(ids(await rotated())).toEqual(['old-1', 'old-2'])
        expect(ids(await fx.readBack())).toEqual(['new-1', 'new-2'])
      })
    }

    if (capabilities.rejects) {
      test('a batch holding data the sink can never store is refused whole, and rejects() says so', async () => {
        const refused = fx.refusedEntry as AuditEntry
        const err = await sink.write([auditEntry('good-1'), refused, auditEntry('good-2')]).then(
          () => null,
          (e: unknown) => e,
        )
        expect(err).not.toBeNull()
        expect(sink.rejects?.(err)).toBe(true)
        // "rejects if none of the batch may be assumed written": none of it is.
        expect(await fx.readBack()).toEqual([])
        // The sink itself is fine: the same entries without the bad one go in.
        await sink.write([auditEntry('good-1'), auditEntry('good-2')])
        expect(ids(await fx.readBack())).toEqual(['good-1', 'good-2'])
      })

      test('rejects() is false for an unavailable medium and for anything that is not the sink refusing data, and never throws', async () => {
        const unavailable = await (fx.unavailableError as () => Promise<unknown>)()
        // Duck-typed: errors from node's own modules come from another realm under jest.
        expect(typeof (unavailable as Error | null)?.message).toBe('string')
        const notRefusals: unknown[] = [
          unavailable,
          new Error('connection terminated unexpectedly'),
          Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' }),
          Object.assign(new Error('odd code'), { code: 42 }),
          { code: null },
          undefined,
          null,
          'a string',
          0,
        ]
        for (const value of notRefusals) expect(sink.rejects?.(value)).toBe(false)
      })
    } else {
      test('a sink without rejects() never refuses an entry for its data', async () => {
        // "Sinks without it never reject": the writer treats every failure as the medium being down,
        // so a sink that refused some data would have that entry retried forever.
        const strange = auditEntry('strange', { timestamp: 'not a time', decision: 'weird' as AuditEntry['decision'], status: -1 })
        await sink.write([strange])
        expect(await fx.readBack()).toEqual([strange])
      })
    }
  })
}
