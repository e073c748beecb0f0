import { existsSync, readFileSync, readdirSync, readlinkSync, realpathSync, renameSync, writeFileSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { JsonlAuditSink } from '../../src/audit/jsonl-sink'
import { tempDir } from '../helpers/harness'
import { StdoutSinkProcess } from '../helpers/stdout-sink'
import { auditSinkContract } from './sink-contract'
import { auditEntry } from '../helpers/audit-entry'

describe('the JSONL audit sink', () => {
  test('appends one line per entry, creating the directory, after what the file already held', async () => {
    const path = join(tempDir(), 'nested', 'audit.jsonl')
    const first = await JsonlAuditSink.open(path)
    await first.write([auditEntry('a')])
    await first.close()
    const second = await JsonlAuditSink.open(path)
    await second.write([auditEntry('b'), auditEntry('c')])
    await second.close()
    expect(
      readFileSync(path, 'utf8')
        .trimEnd()
        .split('\n')
        .map((l) => (JSON.parse(l) as AuditEntry).request_id),
    ).toEqual(['a', 'b', 'c'])
  })

  test('a path that cannot be opened is a configuration error naming audit.output', async () => {
    const file = join(tempDir(), 'a-file')
    writeFileSync(file, '')
    await expect(JsonlAuditSink.open(join(file, 'audit.jsonl'))).rejects.toMatchObject({
      code: 'WL_CONFIG_INVALID',
      message: expect.stringMatching(/^audit\.output: cannot open .*a-file\/audit\.jsonl for appending \(E[A-Z]+\)$/) as unknown,
    })
  })

  test('a closed sink refuses writes instead of sending them anywhere else', async () => {
    const sink = await JsonlAuditSink.open(join(tempDir(), 'audit.jsonl'))
    await sink.close()
    await expect(sink.write([auditEntry('late')])).rejects.toThrow('is closed')
  })
})

describe('line integrity', () => {
  test('after a write torn by a full disk, the next write starts on a fresh line and no entry is glued onto the torn one', async () => {
    const path = join(tempDir(), 'audit.jsonl')
    // A real FileHandle on the real file whose first append lands part of its bytes and then fails
    // with ENOSPC, as a full disk does (injected through the sink's documented openFile test seam).
    let failNext = true
    const sink = await JsonlAuditSink.open(path, {
      openFile: async (p, flags) => {
        const handle = await open(p, flags)
        const write = handle.write.bind(handle) as (buffer: Buffer, offset: number, length: number) => Promise<{ bytesWritten: number }>
        // The sink writes a batch as one Buffer: the first write lands 40 bytes of it, then the disk is full.
        handle.write = (async (buffer: Buffer, offset: number, length: number) => {
          if (!failNext) return write(buffer, offset, length)
          failNext = false
          await write(buffer, offset, Math.min(40, length))
          throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
        }) as typeof handle.write
        return handle
      },
    })
    await expect(sink.write([auditEntry('a')])).rejects.toThrow('ENOSPC')
    await sink.write([auditEntry('a')]) // the writer's retry of the same batch
    await sink.write([auditEntry('b')])
    await sink.close()
    const lines = readFileSync(path, 'utf8').split('\n')
    expect(lines).toHaveLength(4)
    expect(lines[0]).toBe(JSON.stringify(auditEntry('a')).slice(0, 40))
    expect(lines.slice(1, 3).map((l) => (JSON.parse(l) as AuditEntry).request_id)).toEqual(['a', 'b'])
    expect(lines[3]).toBe('')
  })

  test('a write the disk takes a few bytes at a time still lands whole, in order', async () => {
    const path = join(tempDir(), 'audit.jsonl')
    const sink = await JsonlAuditSink.open(path, {
      openFile: async (p, flags) => {
        const handle = await open(p, flags)
        const write = handle.write.bind(handle) as (buffer: Buffer, offset: number, length: number) => Promise<{ bytesWritten: number }>
        // As write(2) may: fewer bytes than asked, every time.
        handle.write = ((buffer: Buffer, offset: number, length: number) =>
          write(buffer, offset, Math.min(7, length))) as typeof handle.write
        return handle
      },
    })
    const entries = ['a', 'b', 'c'].map((id) => auditEntry(id))
    await sink.write(entries)
    await sink.close()
    expect(readFileSync(path, 'utf8')).toBe(entries.map((e) => JSON.stringify(e) + '\n').join(''))
  })

  test('a file left ending in a torn line by an earlier run gets a newline before the first new entry', async () => {
    const path = join(tempDir(), 'audit.jsonl')
    writeFileSync(path, `${JSON.stringify(auditEntry('old'))}\n{"timestamp":"2026-11-29T00:00:00.000Z","requ`)
    const sink = await JsonlAuditSink.open(path)
    await sink.write([auditEntry('new')])
    await sink.write([auditEntry('newer')])
    await sink.close()
    const lines = readFileSync(path, 'utf8').trimEnd().split('\n')
    expect(lines).toHaveLength(4)
    expect([lines[0], lines[2], lines[3]].map((l) => (JSON.parse(l) as AuditEntry).request_id)).toEqual(['old', 'new', 'newer'])
  })

  test('U+2028 and U+2029 in a field are written escaped, and the line reads back to the same string', async () => {
    const path = join(tempDir(), 'audit.jsonl')
    const sink = await JsonlAuditSink.open(path)
    const tool = 'evil\u2028{"decision":"allow"}\u2029x'
    await sink.write([{ ...auditEntry('sep'), tool }])
    await sink.close()
    const text = readFileSync(path, 'utf8')
    expect(text).not.toMatch(/[\u2028\u2029]/)
    expect(text).toContain('evil\\u2028{')
    expect(text).toContain('}\\u2029x')
    // Python's str.splitlines() and JavaScript line terminators would split here; nothing is left to split.
    expect(text.split(/\r\n|[\n\r\u2028\u2029]/).filter((l) => l.length > 0)).toHaveLength(1)
    expect((JSON.parse(text) as AuditEntry).tool).toBe(tool)
  })
})

/**
 * The entries in a JSONL file, split into lines the way the strictest common reader does: Python's
 * str.splitlines() also breaks on \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029. A line any of them
 * split is no longer JSON, so the contract's read-back fails on it.
 */
function readLines(path: string): AuditEntry[] {
  if (!existsSync(path)) return []
  // eslint-disable-next-line no-control-regex -- splitting on these control characters is what this reader imitates
  const lineBreak = /\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/
  return readFileSync(path, 'utf8')
    .split(lineBreak)
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as AuditEntry)
}

/** File descriptors of this process open on `path` (Linux /proc), renamed or deleted ones included. */
function openHandles(path: string): number {
  let n = 0
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`)
      if (target === path || target === `${path} (deleted)`) n++
    } catch {
      // the fd readdir itself used, already closed
    }
  }
  return n
}

auditSinkContract(
  'JsonlAuditSink on a file',
  { retriedEntry: 'twice', refusesWritesAfterClose: true, reopen: 'rotates', rejects: false, holds: 'handles' },
  async () => {
    const path = join(realpathSync(tempDir()), 'audit.jsonl')
    const sink = await JsonlAuditSink.open(path)
    return {
      sink,
      readBack: () => Promise.resolve(readLines(path)),
      rotate: () => {
        renameSync(path, `${path}.1`)
        return Promise.resolve(() => Promise.resolve(readLines(`${path}.1`)))
      },
      handles: () => openHandles(path),
    }
  },
)

auditSinkContract(
  'JsonlAuditSink on stdout',
  { retriedEntry: 'twice', refusesWritesAfterClose: true, reopen: 'no-op', rejects: false, holds: 'nothing' },
  async () => {
    const path = join(tempDir(), 'stdout.jsonl')
    const sink = await StdoutSinkProcess.start(path)
    return { sink, readBack: () => Promise.resolve(readLines(path)), cleanup: () => sink.stop() }
  },
)

describe('JSONL lines and line-splitting readers', () => {
  // splitlines() breaks lines on U+0085 (NEL) as on U+2028/U+2029, and JSON.stringify leaves all
  // three raw. session_id is copied from the Mcp-Session-Id header (or the ?sessionId= query), where a
  // client can put a 0x85 byte: unescaped, one caller could split its own audit line in two for such
  // readers.
  test('U+0085 in a field (a session id from the Mcp-Session-Id header) leaves the line whole for str.splitlines()', async () => {
    const path = join(tempDir(), 'audit.jsonl')
    const sink = await JsonlAuditSink.open(path)
    const nel = auditEntry('nel', { session_id: 'abc\u0085{"decision":"allow"}' })
    await sink.write([nel])
    await sink.close()
    expect(readLines(path)).toEqual([nel])
  })
})
