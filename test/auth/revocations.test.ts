import type { Principal } from '../../src/pipeline/exchange'
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
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(false)
    expect(list.find({ tenant: 'acme', identity: 'alice' }, now)).toBeNull()
  })

  test('a revoked identity is refused in its tenant only, matched exactly (case-sensitive)', async () => {
    const made = await list.revoke({ identity: 'alice', tenant: 'acme', until: null, reason: 'laptop stolen' })
    expect(made).toEqual({
      kind: 'identity',
      identity: 'alice',
      tenant: 'acme',
      until: null,
      created_at: '2026-12-01T12:00:00.000Z',
      reason: 'laptop stolen',
    })
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(true)
    expect(list.isRevoked({ tenant: 'other', identity: 'alice' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: 'acme', identity: 'Alice' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: 'ACME', identity: 'alice' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice ' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: 'acme', identity: 'bob' }, now)).toBe(false)
    expect(list.size).toBe(1)
  })

  test('pairs whose joined strings coincide stay apart: ("a b", "c") is not ("a", "b c")', async () => {
    await list.revoke({ identity: 'c', tenant: 'a b', until: null })
    expect(list.isRevoked({ tenant: 'a b', identity: 'c' }, now)).toBe(true)
    expect(list.isRevoked({ tenant: 'a', identity: 'b c' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: 'a b', identity: 'b c' }, now)).toBe(false)
  })

  test('identity * revokes the whole tenant; removing one identity leaves the tenant revoked; removing * lifts it', async () => {
    await list.revoke({ identity: '*', tenant: 'acme', until: null })
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(list.isRevoked({ tenant: 'acme', identity: 'anyone' }, now)).toBe(true)
    expect(list.find({ tenant: 'acme', identity: 'bob' }, now)).toMatchObject({ identity: '*' })
    expect(list.find({ tenant: 'acme', identity: 'alice' }, now)).toMatchObject({ identity: 'alice' }) // its own entry first
    expect(list.isRevoked({ tenant: 'globex', identity: 'anyone' }, now)).toBe(false)
    expect(await list.remove({ identity: 'alice', tenant: 'acme' })).toBe(true)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(true) // still, through *
    expect(await list.remove({ identity: '*', tenant: 'acme' })).toBe(true)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(false)
    expect(list.size).toBe(0)
  })

  test('tenant * is a literal tenant name, not a wildcard', async () => {
    await list.revoke({ identity: 'alice', tenant: '*', until: null })
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(false)
    expect(list.isRevoked({ tenant: '*', identity: 'alice' }, now)).toBe(true)
  })

  test('a revocation stops applying the moment its until passes, and is cleaned up', async () => {
    const until = new Date(T0 + 60_000)
    const made = await list.revoke({ identity: 'alice', tenant: 'acme', until })
    expect(made.until).toBe('2026-12-01T12:01:00.000Z')
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, T0 + 59_999)).toBe(true)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, T0 + 60_000)).toBe(false)
    // The lookup that found it expired dropped it: the hot path is back to the empty-list fast path.
    expect(list.size).toBe(0)
    now = T0 + 60_000
    expect(await list.list()).toEqual([])
    expect(await list.remove({ identity: 'alice', tenant: 'acme' })).toBe(false)
  })

  test('expired entries leave list(), details() and stats() even when no request looked them up', async () => {
    await list.revoke({ identity: 'a', tenant: 't', until: new Date(T0 + 1000) })
    await list.revoke({ identity: 'b', tenant: 't', until: null })
    now = T0 + 1000
    expect(list.stats()).toEqual({ active: 1, staleSeconds: 0 })
    expect(list.details()).toEqual({ revocations: 'ok', revocations_storage: 'memory', revocations_active: 1 })
    expect((await list.list()).map((r) => (r.kind === 'identity' ? r.identity : r.kind))).toEqual(['b'])
  })

  test('revoking again replaces the entry: a later until, a new reason, no duplicate', async () => {
    await list.revoke({ identity: 'alice', tenant: 'acme', until: new Date(T0 + 1000), reason: 'first' })
    now = T0 + 10
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(list.size).toBe(1)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, T0 + 5000)).toBe(true)
    now = T0 + 5000 // past the first until: the cleanup must not drop the replaced entry
    expect(list.stats().active).toBe(1)
    expect(await list.list()).toEqual([
      { kind: 'identity', identity: 'alice', tenant: 'acme', until: null, created_at: '2026-12-01T12:00:00.010Z' },
    ])
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
    expect((await list.list()).map((r: Revocation) => (r.kind === 'identity' ? `${r.tenant}/${r.identity}` : r.kind))).toEqual([
      'a/*',
      'a/Z',
      'a/z',
      'b/x',
    ])
  })

  test('remove() of something never revoked resolves false and changes nothing', async () => {
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(await list.remove({ identity: 'alice', tenant: 'other' })).toBe(false)
    expect(await list.remove({ identity: 'bob', tenant: 'acme' })).toBe(false)
    expect(list.isRevoked({ tenant: 'acme', identity: 'alice' }, now)).toBe(true)
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
    for (const identity of odd) expect(list.isRevoked({ tenant: "te'nant", identity: identity }, now)).toBe(true)
    expect(list.isRevoked({ tenant: "te'nant", identity: 'a'.repeat(255) }, now)).toBe(false)
  })

  test('ten thousand revocations: lookups stay a map read (measured, not timed)', async () => {
    const heapBefore = process.memoryUsage().heapUsed
    for (let i = 0; i < 10_000; i++) await list.revoke({ identity: `user-${i}`, tenant: `tenant-${i % 50}`, until: null })
    const heapMb = (process.memoryUsage().heapUsed - heapBefore) / 1e6
    expect(list.size).toBe(10_000)
    expect(list.isRevoked({ tenant: 'tenant-7', identity: 'user-7' }, now)).toBe(true)
    expect(list.isRevoked({ tenant: 'tenant-7', identity: 'user-8' }, now)).toBe(false)
    const started = performance.now()
    let hits = 0
    for (let i = 0; i < 1_000_000; i++) if (list.isRevoked({ tenant: 'tenant-3', identity: i % 2 === 0 ? 'user-3' : 'nobody' }, now)) hits++
    const nsPerLookup = ((performance.now() - started) * 1e6) / 1_000_000
    expect(hits).toBe(500_000)
    // For the report: printed, never asserted (a shared machine is noisy).
    console.log(
      `10k revocations: ${nsPerLookup.toFixed(1)} ns per lookup; about ${heapMb.toFixed(1)} MB of heap for the list (no GC forced)`,
    )
  })
})

describe('revocation by token id (jti) and by issue time (issued before)', () => {
  let now: number
  let list: MemoryRevocationList
  /** A principal as the JWT authenticator makes it: iat in seconds. */
  const token = (identity: string, tenant: string, tokenId: string | null, issuedAtMs: number | null): Principal => ({
    identity,
    tenant,
    tokenId,
    issuedAt: issuedAtMs === null ? null : issuedAtMs / 1000,
  })

  beforeEach(() => {
    now = T0
    list = new MemoryRevocationList(() => now)
  })

  test('a revoked jti refuses that token only: another token of the same identity works, whoever holds the revoked one', async () => {
    const made = await list.revoke({ kind: 'jti', jti: 'leaked-1', until: null, reason: 'pasted in a ticket' })
    expect(made).toEqual({
      kind: 'jti',
      jti: 'leaked-1',
      until: null,
      created_at: '2026-12-01T12:00:00.000Z',
      reason: 'pasted in a ticket',
    })
    expect(list.find(token('alice', 'acme', 'leaked-1', T0 - 1000), now)).toEqual(made)
    expect(list.isRevoked(token('bob', 'globex', 'leaked-1', T0), now)).toBe(true) // the id alone decides
    expect(list.isRevoked(token('alice', 'acme', 'fresh-2', T0 - 1000), now)).toBe(false)
    expect(list.isRevoked(token('alice', 'acme', 'Leaked-1', T0), now)).toBe(false) // exact, case-sensitive
    expect(list.isRevoked(token('alice', 'acme', null, T0), now)).toBe(false) // a token without jti is not matched
    expect(list.isRevoked({ identity: 'alice', tenant: 'acme' }, now)).toBe(false)
    expect(await list.remove({ kind: 'jti', jti: 'leaked-1' })).toBe(true)
    expect(list.isRevoked(token('alice', 'acme', 'leaked-1', T0), now)).toBe(false)
    expect(await list.remove({ kind: 'jti', jti: 'leaked-1' })).toBe(false)
  })

  test('issued before T: tokens with an earlier iat are refused, tokens minted at or after T work, a token without iat is refused', async () => {
    const before = new Date(T0 - 60_000)
    const made = await list.revoke({ kind: 'issued_before', identity: 'alice', tenant: 'acme', issuedBefore: before, until: null })
    expect(made).toEqual({
      kind: 'issued_before',
      identity: 'alice',
      tenant: 'acme',
      issued_before: '2026-12-01T11:59:00.000Z',
      until: null,
      created_at: '2026-12-01T12:00:00.000Z',
    })
    expect(list.find(token('alice', 'acme', 'old', T0 - 61_000), now)).toEqual(made)
    expect(list.isRevoked(token('alice', 'acme', 'edge', T0 - 60_001), now)).toBe(true)
    expect(list.isRevoked(token('alice', 'acme', 'at-t', T0 - 60_000), now)).toBe(false)
    expect(list.isRevoked(token('alice', 'acme', 'new', T0), now)).toBe(false)
    expect(list.isRevoked(token('alice', 'acme', 'no-iat', null), now)).toBe(true) // conservative: nothing shows it is newer
    expect(list.isRevoked({ identity: 'alice', tenant: 'acme', tokenId: null, issuedAt: null }, now)).toBe(true) // header mode
    expect(list.isRevoked(token('alice', 'globex', 'old', T0 - 61_000), now)).toBe(false)
    expect(list.isRevoked(token('bob', 'acme', 'old', T0 - 61_000), now)).toBe(false)
  })

  test("a tenant-wide issued-before (*) and an identity's own are both checked: the later time decides for that identity", async () => {
    await list.revoke({ kind: 'issued_before', identity: 'alice', tenant: 'acme', issuedBefore: new Date(T0 - 120_000), until: null })
    await list.revoke({ kind: 'issued_before', identity: '*', tenant: 'acme', issuedBefore: new Date(T0 - 60_000), until: null })
    const between = token('alice', 'acme', 'x', T0 - 90_000) // after alice's own time, before the tenant's
    expect(list.find(between, now)).toMatchObject({ kind: 'issued_before', identity: '*' })
    expect(list.isRevoked(token('bob', 'acme', 'y', T0 - 90_000), now)).toBe(true)
    expect(list.isRevoked(token('bob', 'acme', 'y', T0 - 30_000), now)).toBe(false)
  })

  test('the kinds are separate entries: an identity revocation and an issued-before one coexist, and removing one leaves the other', async () => {
    await list.revoke({ identity: 'alice', tenant: 'acme', until: null })
    await list.revoke({ kind: 'issued_before', identity: 'alice', tenant: 'acme', issuedBefore: new Date(T0 - 60_000), until: null })
    await list.revoke({ kind: 'jti', jti: 'alice', until: null }) // a jti equal to an identity is still a jti
    expect(list.size).toBe(3)
    expect(list.find(token('alice', 'acme', 'n', T0), now)).toMatchObject({ kind: 'identity' }) // the identity's first
    expect(await list.remove({ identity: 'alice', tenant: 'acme' })).toBe(true)
    expect(list.isRevoked(token('alice', 'acme', 'n', T0), now)).toBe(false) // newer token: only issued-before left
    expect(list.isRevoked(token('alice', 'acme', 'o', T0 - 61_000), now)).toBe(true)
    expect(await list.remove({ kind: 'issued_before', identity: 'alice', tenant: 'acme' })).toBe(true)
    expect(list.isRevoked(token('alice', 'acme', 'o', T0 - 61_000), now)).toBe(false)
    expect(list.isRevoked(token('bob', 'x', 'alice', T0), now)).toBe(true)
    expect(list.size).toBe(1)
  })

  test('list() shows every kind: identity ones, then issued-before, then jti, each sorted', async () => {
    await list.revoke({ kind: 'jti', jti: 'b', until: null })
    await list.revoke({ kind: 'jti', jti: 'a', until: null })
    await list.revoke({ kind: 'issued_before', identity: 'z', tenant: 'acme', issuedBefore: new Date(T0), until: null })
    await list.revoke({ kind: 'issued_before', identity: 'alice', tenant: 'acme', issuedBefore: new Date(T0), until: null })
    await list.revoke({ identity: 'carol', tenant: 'acme', until: null })
    const listed = await list.list()
    expect(listed.map((r) => (r.kind === 'jti' ? `jti:${r.jti}` : `${r.kind}:${r.tenant}/${r.identity}`))).toEqual([
      'identity:acme/carol',
      'issued_before:acme/alice',
      'issued_before:acme/z',
      'jti:a',
      'jti:b',
    ])
  })

  test('jti and issued-before revocations end at their until like identity ones, and are pruned', async () => {
    await list.revoke({ kind: 'jti', jti: 'j', until: new Date(T0 + 1000) })
    await list.revoke({ kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date(T0), until: new Date(T0 + 2000) })
    expect(list.isRevoked(token('x', 'y', 'j', T0), T0 + 999)).toBe(true)
    expect(list.isRevoked(token('x', 'y', 'j', T0), T0 + 1000)).toBe(false)
    expect(list.isRevoked(token('a', 't', 'k', T0 - 1), T0 + 1999)).toBe(true)
    now = T0 + 2000
    expect(list.stats().active).toBe(0)
    expect(await list.list()).toEqual([])
  })

  test('revoking the same target again replaces it: a new issued-before time, a new until', async () => {
    await list.revoke({ kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date(T0 - 60_000), until: null })
    await list.revoke({ kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date(T0), until: null })
    expect(list.size).toBe(1)
    expect(list.isRevoked(token('a', 't', 'k', T0 - 30_000), now)).toBe(true)
  })

  test.each([
    ['empty jti', { kind: 'jti', jti: '' }, 'jti is empty'],
    ['numeric jti', { kind: 'jti', jti: 7 }, 'jti must be a string'],
    ['257-byte jti', { kind: 'jti', jti: 'j'.repeat(257) }, 'jti is longer than 256 bytes'],
    ['line break in jti', { kind: 'jti', jti: 'abc\n' }, 'jti contains control characters'],
    ['space around jti', { kind: 'jti', jti: ' abc' }, 'jti has leading or trailing whitespace'],
    ['lone surrogate in jti', { kind: 'jti', jti: 'a\udc00' }, 'jti is not well-formed Unicode'],
    [
      'issued_before an hour ahead',
      { kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date(T0 + 3_600_000) },
      'issued_before (2026-12-01T13:00:00.000Z) is in the future: it would refuse tokens not minted yet (use the current time)',
    ],
    [
      'issued_before not a date',
      { kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date('x') },
      'issued_before must be a date (ISO 8601)',
    ],
    ['issued_before without tenant', { kind: 'issued_before', identity: 'a', issuedBefore: new Date(T0) }, 'tenant must be a string'],
    [
      'issued_before with a bad identity',
      { kind: 'issued_before', identity: ' a', tenant: 't', issuedBefore: new Date(T0) },
      'identity has leading or trailing whitespace',
    ],
    ['unknown kind', { kind: 'everything', identity: 'a', tenant: 't' }, 'kind must be identity, jti or issued_before'],
    [
      'issued_before in year 0',
      { kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date('0000-01-01T00:00:00Z') },
      'issued_before (0000-01-01T00:00:00.000Z) is not after 1970-01-01T00:00:00Z: it would refuse nothing',
    ],
  ])('bad input (%s) is refused with a message naming the field, and changes nothing', async (_label, input, message) => {
    const request = { until: null, ...input } as unknown as Parameters<MemoryRevocationList['revoke']>[0]
    expect(checkRevocationInput(request, T0)).toBe(message)
    await expect(list.revoke(request)).rejects.toThrow(message)
    expect(list.size).toBe(0)
  })

  test('issued_before up to a minute ahead is accepted (the operator\'s "now" on a clock slightly ahead)', async () => {
    await list.revoke({ kind: 'issued_before', identity: 'a', tenant: 't', issuedBefore: new Date(T0 + 59_000), until: null })
    expect(list.isRevoked(token('a', 't', 'k', T0), now)).toBe(true)
  })
})
