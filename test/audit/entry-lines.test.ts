import { type AuditEntry, isoTimestamp, jsonString, toJsonLines } from '../../src/audit/entry'

/** What the audit line was before it was built by hand: JSON.stringify, then the three line breaks escaped. */
function reference(entries: readonly AuditEntry[]): string {
  let text = ''
  for (const e of entries) text += JSON.stringify(e) + '\n'
  return text.replace(/[\u0085\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

const NASTY = [
  '',
  'alice',
  'a"b',
  'back\\slash',
  'tab\there',
  'nul\u0000x',
  'del\u007fx',
  'c1\u0085\u0090x',
  'ls\u2028ps\u2029',
  'lone\ud800high',
  'lone\udc00low',
  'pair 😀 ok',
  'café',
  '</script>',
  '\u001f\u0020\u007e',
]

function entry(text: string, extra: Partial<AuditEntry> = {}): AuditEntry {
  return {
    timestamp: '2026-12-01T19:36:22.005Z',
    request_id: '0b0e6e57-3d6f-4b8e-9f70-1f2a3b4c5d6e',
    identity: text,
    tenant: `t${text}`,
    method: 'tools/call',
    tool: `${text}tool`,
    decision: 'allow',
    status: 200,
    latency_ms: 1.234,
    ...extra,
  }
}

describe('audit JSONL lines, built by hand', () => {
  it.each(NASTY.map((s) => [JSON.stringify(s), s]))('write %s exactly as JSON.stringify plus the line-break escapes did', (_name, text) => {
    const entries = [
      entry(text),
      entry(text, { reason: `why ${text}`, session_id: text }),
      entry(text, { reason: text }),
      entry(text, { session_id: `s${text}` }),
      entry(text, { reason: 'r', session_id: 's', server: text }),
      entry(text, { server: `srv${text}` }),
    ]
    const lines = toJsonLines(entries)
    expect(lines).toBe(reference(entries))
    // And every line reads back as the entry it came from.
    expect(
      lines
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as AuditEntry),
    ).toEqual(entries)
  })

  it('writes every decision, status and latency as JSON.stringify does (NaN and Infinity as null)', () => {
    const entries = (['allow', 'deny', 'throttled', 'passthrough', 'error', 'unauthorized'] as const).flatMap((decision) =>
      [0, 0.001, 12.5, 1e21, Number.NaN, Number.POSITIVE_INFINITY, -0].map((latency) =>
        entry('x', { decision, latency_ms: latency, status: 429 }),
      ),
    )
    expect(toJsonLines(entries)).toBe(reference(entries))
  })

  it('writes latencies as JSON.stringify does, over every microsecond to 20 ms and a spread beyond', () => {
    const values: number[] = []
    for (let us = 0; us <= 20_000; us++) values.push(Math.round(us) / 1000)
    for (let i = 0; i < 20_000; i++) values.push(Math.round(Math.random() * 1e12) / 1000)
    values.push(0.0001, 1e-7, 123.4567, -1.5, -0, 1e21, 2 ** 53, Number.MAX_SAFE_INTEGER / 1000, 0.1 + 0.2)
    const entries = values.map((latency) => entry('x', { latency_ms: latency }))
    expect(toJsonLines(entries)).toBe(reference(entries))
  })

  it('leaves printable ASCII as it is and sends everything else through JSON.stringify', () => {
    expect(jsonString('printable ~ ascii')).toBe('"printable ~ ascii"')
    for (const s of NASTY) expect(JSON.parse(jsonString(s))).toBe(s)
    expect(jsonString('\u2028')).toBe('"\\u2028"')
  })

  it('writes nothing for no entries', () => {
    expect(toJsonLines([])).toBe('')
  })
})

describe('isoTimestamp (the audit timestamp, cached per second)', () => {
  it('agrees with toISOString across second boundaries and through the cache', () => {
    const base = Date.UTC(2026, 11, 1, 23, 59, 58, 990)
    for (let ms = base; ms < base + 2_100; ms += 7) expect(isoTimestamp(ms)).toBe(new Date(ms).toISOString())
    // Back to an earlier second after the cache moved on.
    expect(isoTimestamp(base)).toBe(new Date(base).toISOString())
  })

  it.each([0, 1, 999, 1000, -1, -1001, 8.64e15, 253402300800000, 1764624982005.5])('agrees with toISOString at %p', (ms) => {
    expect(isoTimestamp(ms)).toBe(new Date(ms).toISOString())
  })
})

describe('audit JSONL lines of entries not built by auditEntries', () => {
  it('writes an entry missing a field, or holding another type, exactly as JSON.stringify does', () => {
    const { identity: _identity, ...missing } = entry('x')
    const odd = { ...entry('y\u2028'), status: '200' } as unknown as AuditEntry
    const entries = [missing as AuditEntry, odd, entry('z', { reason: undefined })]
    expect(toJsonLines(entries)).toBe(reference(entries))
  })
})
