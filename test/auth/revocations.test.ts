import { MemoryRevocationList, type Revocation, RevocationInputError, checkRevocationInput } from '../../src/auth/revocations'

const T0 = Date.parse('2026-12-01T12:00:00.000Z')

describe('MemoryRevocationList', () => {
  let now: number
  let list: MemoryRevocationList

  beforeEach(() => {
    now = T0
    list = new MemoryRevocationList(() => now)
  })

  test('an empty list revokes no one and reports size 0', () => {
    expect(list.size).toBe(0)
    expect(list.isRevoked('acme', 'alice', now)).toBe(false)
    expect(list.find('acme', 'alice', now)).toBeNull()
  })

  test('a revoked identity is refused in its tenant only, matched exactly (case-sensitive)', async () => {
    const made = await list.revoke({ identity: 'alice', tenant: 'acme', until: null, reason: 'laptop stolen' })
    expect(made).toEqual({
      identity: 'alice',
      tenant: 'acme',
      until: null,
      created_at: '2026-12-01T12:00:00.000Z',
      reason: 'laptop stolen',
    })
    expect(list.isRevoked('acme', 'alice', now)).toBe(true)
    expect(list.isRevoked('other', 'alice', now)).toBe(false)
    expect(list.isRevoked('acme', 'Alice', now)).toBe(false)
    expect(list.isRevoked('ACME', 'alice', now)).toBe(false)
    expect(list.isRevoked('acme', 'alice ', now)).toBe(false)
    expect(list.isRevoked('acme', 'bob', now)).toBe(false)
    expect(list.size).toBe(1)
  })

  test('pairs whose joined strings coincide stay apart: ("a b", "c") is not ("a", "b c")', async () => {
    await list.revoke({ identity: 'c', tenant: 'a b', until: null })
    expect(list.isRevoked('a b', 'c', now)).toBe(true)
    expect(list.isRevoked('a', 'b c', now)).toBe(false)
    expect(list.isRevoked('a b', 'b c', now)).toBe(false)
  })

  test('identity * revokes the whole tenant; removing one identity leaves the tenant revoked; removing * lifts it', async () => {
    await list.revoke({ identity: '*', tenant: 'acme', until: null })
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(list.isRevoked('acme', 'anyone', now)).toBe(true)
    expect(list.find('acme', 'bob', now)?.identity).toBe('*')
    expect(list.find('acme', 'alice', now)?.identity).toBe('alice') // its own entry first
    expect(list.isRevoked('globex', 'anyone', now)).toBe(false)
    expect(await list.remove('alice', 'acme')).toBe(true)
    expect(list.isRevoked('acme', 'alice', now)).toBe(true) // still, through *
    expect(await list.remove('*', 'acme')).toBe(true)
    expect(list.isRevoked('acme', 'alice', now)).toBe(false)
    expect(list.size).toBe(0)
  })

  test('tenant * is a literal tenant name, not a wildcard', async () => {
    await list.revoke({ identity: 'alice', tenant: '*', until: null })
    expect(list.isRevoked('acme', 'alice', now)).toBe(false)
    expect(list.isRevoked('*', 'alice', now)).toBe(true)
  })

  test('a revocation stops applying the moment its until passes, and is cleaned up', async () => {
    const until = new Date(T0 + 60_000)
    const made = await list.revoke({ identity: 'alice', tenant: 'acme', until })
    expect(made.until).toBe('2026-12-01T12:01:00.000Z')
    expect(list.isRevoked('acme', 'alice', T0 + 59_999)).toBe(true)
    expect(list.isRevoked('acme', 'alice', T0 + 60_000)).toBe(false)
    // The lookup that found it expired dropped it: the hot path is back to the empty-list fast path.
    expect(list.size).toBe(0)
    now = T0 + 60_000
    expect(await list.list()).toEqual([])
    expect(await list.remove('alice', 'acme')).toBe(false)
  })

  test('expired entries leave list(), details() and stats() even when no request looked them up', async () => {
    await list.revoke({ identity: 'a', tenant: 't', until: new Date(T0 + 1000) })
    await list.revoke({ identity: 'b', tenant: 't', until: null })
    now = T0 + 1000
    expect(list.stats()).toEqual({ active: 1, staleSeconds: 0 })
    expect(list.details()).toEqual({ revocations: 'ok', revocations_storage: 'memory', revocations_active: 1 })
    expect((await list.list()).map((r) => r.identity)).toEqual(['b'])
  })

  test('revoking again replaces the entry: a later until, a new reason, no duplicate', async () => {
    await list.revoke({ identity: 'alice', tenant: 'acme', until: new Date(T0 + 1000), reason: 'first' })
    now = T0 + 10
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(list.size).toBe(1)
    expect(list.isRevoked('acme', 'alice', T0 + 5000)).toBe(true)
    now = T0 + 5000 // past the first until: the cleanup must not drop the replaced entry
    expect(list.stats().active).toBe(1)
    expect(await list.list()).toEqual([{ identity: 'alice', tenant: 'acme', until: null, created_at: '2026-12-01T12:00:00.010Z' }])
  })

  test('list() is sorted by tenant, then identity, in code unit order', async () => {
    for (const [tenant, identity] of [
      ['b', 'x'],
      ['a', 'z'],
      ['a', 'Z'],
      ['a', '*'],
    ]) {
      await list.revoke({ identity, tenant, until: null })
    }
    expect((await list.list()).map((r: Revocation) => `${r.tenant}/${r.identity}`)).toEqual(['a/*', 'a/Z', 'a/z', 'b/x'])
  })

  test('remove() of something never revoked resolves false and changes nothing', async () => {
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(await list.remove('alice', 'other')).toBe(false)
    expect(await list.remove('bob', 'acme')).toBe(false)
    expect(list.isRevoked('acme', 'alice', now)).toBe(true)
  })

  test.each([
    ['empty identity', { identity: '', tenant: 'acme' }, 'identity is empty'],
    ['empty tenant', { identity: 'alice', tenant: '' }, 'tenant is empty'],
    ['NUL in identity', { identity: 'al\0ice', tenant: 'acme' }, 'identity contains control characters'],
    ['newline in tenant', { identity: 'alice', tenant: 'ac\nme' }, 'tenant contains control characters'],
    ['leading space', { identity: ' alice', tenant: 'acme' }, 'identity has leading or trailing whitespace'],
    ['257-byte identity', { identity: 'a'.repeat(257), tenant: 'acme' }, 'identity is longer than 256 bytes'],
    ['258 bytes of é', { identity: 'é'.repeat(129), tenant: 'acme' }, 'identity is longer than 256 bytes'],
    ['lone surrogate', { identity: '\ud800', tenant: 'acme' }, 'identity is not well-formed Unicode'],
    [
      'until now',
      { identity: 'alice', tenant: 'acme', until: new Date(T0) },
      'until (2026-12-01T12:00:00.000Z) is not in the future: the revocation would never apply',
    ],
    ['invalid until', { identity: 'alice', tenant: 'acme', until: new Date('nope') }, 'until must be a date (ISO 8601) or null'],
    ['1025-character reason', { identity: 'alice', tenant: 'acme', reason: 'x'.repeat(1025) }, 'reason is longer than 1024 characters'],
    [
      'NUL in reason',
      { identity: 'alice', tenant: 'acme', reason: 'a\u0000b' },
      'reason contains a control character (U+0000) at character 2: a reason is one line of printable text',
    ],
    [
      'newline in reason',
      { identity: 'alice', tenant: 'acme', reason: 'ok\nforged row' },
      'reason contains a line break (U+000A) at character 3: a reason is one line of printable text',
    ],
    [
      'C1 CSI in reason',
      { identity: 'alice', tenant: 'acme', reason: '\u009b31m' },
      'reason contains a control character (U+009B) at character 1: a reason is one line of printable text',
    ],
    [
      'U+2028 in reason',
      { identity: 'alice', tenant: 'acme', reason: 'a\u2028b' },
      'reason contains a line break (U+2028) at character 2: a reason is one line of printable text',
    ],
    ['numeric identity', { identity: 42, tenant: 'acme' }, 'identity must be a string'],
  ])('bad input (%s) is refused with a message naming the field, and changes nothing', async (_label, input, message) => {
    const request = { until: null, ...input } as unknown as Parameters<MemoryRevocationList['revoke']>[0]
    expect(checkRevocationInput(request, T0)).toBe(message)
    const refused = list.revoke(request)
    await expect(refused).rejects.toThrow(RevocationInputError)
    await expect(refused).rejects.toThrow(message)
    expect(list.size).toBe(0)
  })

  test('quotes, backslashes, emoji and a 256-byte identity are ordinary values', async () => {
    const odd = ['o\'brien "the" \\admin', '🦊'.repeat(64), 'a'.repeat(256), '%00', '${VAR}']
    for (const identity of odd) await list.revoke({ identity, tenant: "te'nant", until: null, reason: 'quotes "and" \\ are fine' })
    for (const identity of odd) expect(list.isRevoked("te'nant", identity, now)).toBe(true)
    expect(list.isRevoked("te'nant", 'a'.repeat(255), now)).toBe(false)
  })

  test('ten thousand revocations: lookups stay a map read (measured, not timed)', async () => {
    const heapBefore = process.memoryUsage().heapUsed
    for (let i = 0; i < 10_000; i++) await list.revoke({ identity: `user-${i}`, tenant: `tenant-${i % 50}`, until: null })
    const heapMb = (process.memoryUsage().heapUsed - heapBefore) / 1e6
    expect(list.size).toBe(10_000)
    expect(list.isRevoked('tenant-7', 'user-7', now)).toBe(true)
    expect(list.isRevoked('tenant-7', 'user-8', now)).toBe(false)
    const started = performance.now()
    let hits = 0
    for (let i = 0; i < 1_000_000; i++) if (list.isRevoked('tenant-3', i % 2 === 0 ? 'user-3' : 'nobody', now)) hits++
    const nsPerLookup = ((performance.now() - started) * 1e6) / 1_000_000
    expect(hits).toBe(500_000)
    // For the report: printed, never asserted (a shared machine is noisy).
    console.log(
      `10k revocations: ${nsPerLookup.toFixed(1)} ns per lookup; about ${heapMb.toFixed(1)} MB of heap for the list (no GC forced)`,
    )
  })
})
