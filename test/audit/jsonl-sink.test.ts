import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { JsonlAuditSink } from '../../src/audit/jsonl-sink'
import { tempDir } from '../helpers/harness'

const entry = (id: string): AuditEntry => ({
  timestamp: '2026-11-29T00:00:00.000Z', request_id: id, identity: 'alice', tenant: 'acme', method: 'tools/call',
  tool: 'echo', decision: 'allow', status: 200, latency_ms: 1.5,
})

describe('the JSONL audit sink', () => {
  test('appends one line per entry, creating the directory, after what the file already held', async () => {
    const path = join(tempDir(), 'nested', 'audit.jsonl')
    const first = await JsonlAuditSink.open(path)
    await first.write([entry('a')])
    await first.close()
    const second = await JsonlAuditSink.open(path)
    await second.write([entry('b'), entry('c')])
    await second.close()
    expect(readFileSync(path, 'utf8').trimEnd().split('\n').map((l) => (JSON.parse(l) as AuditEntry).request_id)).toEqual(['a', 'b', 'c'])
  })

  test('a path that cannot be opened is a configuration error naming audit.output', async () => {
    const file = join(tempDir(), 'a-file')
    writeFileSync(file, '')
    await expect(JsonlAuditSink.open(join(file, 'audit.jsonl'))).rejects.toMatchObject({
      code: 'WL_CONFIG_INVALID',
      message: expect.stringMatching(/^audit\.output: cannot open .*a-file\/audit\.jsonl for appending \(E[A-Z]+\)$/),
    })
  })

  test('a closed sink refuses writes instead of sending them anywhere else', async () => {
    const sink = await JsonlAuditSink.open(join(tempDir(), 'audit.jsonl'))
    await sink.close()
    await expect(sink.write([entry('late')])).rejects.toThrow('is closed')
  })
})
