import { requestId } from '../src/request-id'

describe('requestId (a random version 4 UUID per request)', () => {
  const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

  it('is lower-case 8-4-4-4-12 text with the version and variant bits of RFC 9562, as randomUUID() writes it', () => {
    // Past several batches of random bytes, so a refill is crossed too.
    for (let i = 0; i < 1_000; i++) expect(requestId()).toMatch(UUID_V4)
  })

  it('never repeats and owns its text (the buffer it is written in is reused)', () => {
    const ids = Array.from({ length: 2_000 }, () => requestId())
    expect(new Set(ids).size).toBe(ids.length)
    for (const id of ids) expect(id).toMatch(UUID_V4)
  })

  it('uses every hex digit in the random positions', () => {
    const seen = new Set<string>()
    for (let i = 0; i < 200; i++) for (const c of requestId().replace(/-/g, '')) seen.add(c)
    expect([...seen].sort().join('')).toBe('0123456789abcdef')
  })
})
