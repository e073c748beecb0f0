import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { AuditSpill } from '../../src/audit/spill'
import { auditEntry } from '../helpers/audit-entry'
import { tempDir } from '../helpers/harness'

class Refused extends Error {}

describe('replaying the spill file', () => {
  test('an entry the sink refuses, followed by a torn line in the same batch, is quarantined, not lost', async () => {
    const path = join(tempDir(), 'spill.jsonl')
    const line = (id: string): string => JSON.stringify(auditEntry(id))
    writeFileSync(path, `${line('a')}\n${line('poison')}\n{"timestamp":"2026-11-29T0\n${line('b')}\n`)
    const spill = AuditSpill.open(path)
    const written: string[] = []
    const write = (batch: AuditEntry[]): Promise<void> => {
      if (batch.some((e) => e.request_id === 'poison')) return Promise.reject(new Refused('value refused'))
      written.push(...batch.map((e) => e.request_id))
      return Promise.resolve()
    }
    const rejected: string[] = []
    const replayed = await spill.replay(write, 10, {
      isRejection: (err) => err instanceof Refused,
      onRejected: (l) => rejected.push(l),
    })
    expect(replayed).toBe(2)
    expect(written).toEqual(['a', 'b'])
    // Every line is either written or quarantined, in file order.
    expect(readFileSync(spill.rejectedPath, 'utf8')).toBe(`${line('poison')}\n{"timestamp":"2026-11-29T0\n`)
    expect(rejected).toHaveLength(2)
    expect(spill.hasEntries).toBe(false)
  })
})
