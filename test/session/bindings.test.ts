import { type Eviction, SessionBindings, sessionKey } from '../../src/session/bindings'

const ALICE = { tenant: 'acme', identity: 'alice' }
const BOB = { tenant: 'acme', identity: 'bob' }
const MALLORY = { tenant: 'evil', identity: 'mallory' }

function bindings(limits: Partial<{ idleMs: number; maxSessions: number; maxPerIdentity: number }> = {}) {
  const clock = { now: 0 }
  const evicted: Eviction[] = []
  const b = new SessionBindings(
    { idleMs: 60_000, maxSessions: 100, maxPerIdentity: 100, ...limits },
    () => clock.now,
    (cause) => evicted.push(cause),
  )
  return { b, clock, evicted }
}

describe('session bindings', () => {
  test('a bound id is allowed to its creator only; an unknown id to anyone', () => {
    const { b } = bindings()
    b.bind('s1', ALICE)
    expect(b.allows('s1', ALICE)).toBe(true)
    expect(b.allows('s1', BOB)).toBe(false)
    expect(b.allows('s1', MALLORY)).toBe(false)
    expect(b.allows('never-seen', MALLORY)).toBe(true)
  })

  test('owners are compared exactly: no tenant/identity split makes two principals one', () => {
    const { b } = bindings()
    b.bind('s1', { tenant: 'ac', identity: 'mealice' })
    expect(b.allows('s1', { tenant: 'acme', identity: 'alice' })).toBe(false)
    b.bind('s2', { tenant: 'a:b', identity: 'c' })
    expect(b.allows('s2', { tenant: 'a', identity: 'b:c' })).toBe(false)
  })

  test('an id idle for idleMs is forgotten; its owner using it keeps it', () => {
    const { b, clock } = bindings({ idleMs: 60_000 })
    b.bind('idle', ALICE)
    b.bind('busy', ALICE)
    clock.now = 50_000
    expect(b.allows('busy', ALICE)).toBe(true) // a use by the owner
    expect(b.allows('idle', MALLORY)).toBe(false) // a refused use is not a use
    clock.now = 60_000
    expect(b.allows('idle', MALLORY)).toBe(true)
    expect(b.allows('busy', MALLORY)).toBe(false)
    // Creating a session sweeps the idle ones: memory does not wait for a lookup.
    clock.now = 120_000
    b.bind('new', BOB)
    expect(b.size).toBe(1)
  })

  test("an owner's open stream keeps its binding from idling out; its end counts as a use", () => {
    const { b, clock } = bindings({ idleMs: 60_000 })
    b.bind('listening', ALICE)
    expect(b.pin('listening', MALLORY)).toBe(false) // only the owner's streams count
    expect(b.pin('listening', ALICE)).toBe(true)
    clock.now = 600_000
    b.bind('other', BOB) // sweeps: the pinned one is kept
    expect(b.allows('listening', MALLORY)).toBe(false)
    b.unpin('listening')
    clock.now = 659_999
    expect(b.allows('listening', MALLORY)).toBe(false)
    clock.now = 660_000
    expect(b.allows('listening', MALLORY)).toBe(true)
  })

  test('a successful DELETE by the owner forgets the id; one by anyone else does not', () => {
    const { b } = bindings()
    b.bind('s1', ALICE)
    b.release('s1', MALLORY)
    expect(b.allows('s1', MALLORY)).toBe(false)
    b.release('s1', ALICE)
    expect(b.size).toBe(0)
    expect(b.allows('s1', MALLORY)).toBe(true)
  })

  test('full: the least recently used binding goes, and the eviction is reported', () => {
    const { b, clock, evicted } = bindings({ maxSessions: 3 })
    b.bind('a', ALICE)
    clock.now = 2000
    b.bind('b', BOB)
    clock.now = 4000
    b.bind('c', MALLORY)
    clock.now = 6000
    expect(b.allows('a', ALICE)).toBe(true) // 'a' is now the most recently used
    b.bind('d', BOB)
    expect(b.size).toBe(3)
    expect(evicted).toEqual(['full'])
    expect(b.allows('b', MALLORY)).toBe(true) // forgotten: unknown
    expect(b.allows('a', MALLORY)).toBe(false)
  })

  test("one identity creating sessions without end evicts only its own, never another's", () => {
    const { b, evicted } = bindings({ maxSessions: 10, maxPerIdentity: 3 })
    b.bind('alice-1', ALICE)
    for (let i = 0; i < 50; i++) b.bind(`m-${i}`, MALLORY)
    expect(b.allows('alice-1', MALLORY)).toBe(false)
    expect(b.size).toBe(4)
    expect(evicted.length).toBe(47)
    expect(new Set(evicted)).toEqual(new Set(['identity_full']))
  })

  test('an id the upstream hands to two principals is theirs to share', () => {
    const { b } = bindings()
    b.bind('same-for-all', ALICE)
    b.bind('same-for-all', BOB)
    expect(b.allows('same-for-all', ALICE)).toBe(true)
    expect(b.allows('same-for-all', BOB)).toBe(true)
  })

  test('bindings are per server: the same id at another server is unknown there, and binding it there shares nothing', () => {
    const { b } = bindings()
    const id = 'bcdef012-3456-789a-bcde-f0123456789a'
    b.bind(id, ALICE, 'docs')
    expect(b.allows(id, MALLORY, 'docs')).toBe(false)
    // Another server issued the same id: unknown there, so its server judges it.
    expect(b.allows(id, MALLORY, 'tickets')).toBe(true)
    // Mallory's session of that id at the other server is hers there, and leaves Alice's as it was.
    b.bind(id, MALLORY, 'tickets')
    expect(b.allows(id, ALICE, 'tickets')).toBe(false)
    expect(b.allows(id, MALLORY, 'docs')).toBe(false)
    // Every spelling is scoped too, and so are pins and deletes.
    expect(b.allows(id.replaceAll('-', '').toUpperCase(), MALLORY, 'docs')).toBe(false)
    expect(b.pin(id, MALLORY, 'docs')).toBe(false)
    b.release(id, MALLORY, 'docs')
    expect(b.allows(id, MALLORY, 'docs')).toBe(false)
    b.release(id, ALICE, 'docs')
    expect(b.allows(id, MALLORY, 'docs')).toBe(true)
    expect(b.allows(id, ALICE, 'tickets')).toBe(false)
    // With `upstream:` alone (no server name) ids are keyed as before, apart from every named server's.
    expect(b.allows(id, ALICE)).toBe(true)
  })

  test('full: the least recently used binding of any server goes; the idle sweep covers every server', () => {
    const { b, clock, evicted } = bindings({ maxSessions: 3, idleMs: 60_000 })
    b.bind('s1', ALICE, 'docs')
    clock.now = 2_000
    b.bind('s2', BOB, 'tickets')
    clock.now = 4_000
    b.bind('s3', ALICE, 'docs')
    clock.now = 6_000
    expect(b.allows('s1', ALICE, 'docs')).toBe(true) // s1 is now the most recent: s2 is the oldest
    b.bind('s4', BOB, 'docs')
    expect(evicted).toEqual(['full'])
    expect(b.allows('s2', MALLORY, 'tickets')).toBe(true)
    expect(b.allows('s1', MALLORY, 'docs')).toBe(false)
    clock.now = 200_000
    b.bind('s5', BOB, 'tickets')
    expect(b.size).toBe(1)
  })

  test("every spelling Python's uuid.UUID(hex=...) reads as the owner's UUID is the owner's", () => {
    const { b } = bindings()
    b.bind('bcdef012-3456-789a-bcde-f0123456789a', ALICE)
    // Each spelling below is what CPython's uuid.UUID(hex=s).hex turns into bcdef0123456789abcdef0123456789a.
    for (const spelling of [
      'bcdef0123456789abcdef0123456789a',
      'BCDEF0123456789ABCDEF0123456789A',
      'urn:uuid:{BCDEF012-3456-789A-BCDE-F0123456789A}',
      '{bcdef0123456789abcdef0123456789a}',
      'b-c-d-e-f0123456789abcdef0123456789a',
    ]) {
      expect({ spelling, allowed: b.allows(spelling, MALLORY) }).toEqual({ spelling, allowed: false })
    }
  })

  test('sessionKey follows CPython uuid.UUID(hex=...): sign, whitespace, underscores, other scripts, 0x', () => {
    // Vectors printed by CPython 3 (python3 -c 'import uuid; print(uuid.UUID(hex=s))').
    expect(sessionKey('+bcdef0123456789abcdef0123456789')).toBe('0bcdef01-2345-6789-abcd-ef0123456789')
    expect(sessionKey(' bcdef0123456789abcdef0123456789')).toBe('0bcdef01-2345-6789-abcd-ef0123456789')
    expect(sessionKey('\u0660bcdef0123456789abcdef0123456789')).toBe('0bcdef01-2345-6789-abcd-ef0123456789')
    expect(sessionKey('0_bcdef0123456789abcdef012345678')).toBe('00bcdef0-1234-5678-9abc-def012345678')
    expect(sessionKey('0xbcdef0123456789abcdef012345678')).toBe('00bcdef0-1234-5678-9abc-def012345678')
    expect(sessionKey('0x_bcdef0123456789abcdef01234567')).toBe('000bcdef-0123-4567-89ab-cdef01234567')
    // 33 characters: Python refuses it, so it is its own text.
    expect(sessionKey('0x0bcdef0123456789abcdef012345678')).toBe('0x0bcdef0123456789abcdef012345678')
    expect(sessionKey('bcdef0123456789abcdef0123456789a')).toBe('bcdef012-3456-789a-bcde-f0123456789a')
    expect(sessionKey('bcdef012-3456-789a-bcde-f0123456789a')).toBe('bcdef012-3456-789a-bcde-f0123456789a')
    // Not a UUID to Python: kept as it is.
    expect(sessionKey('session-1')).toBe('session-1')
    expect(sessionKey('zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz')).toBe('zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz')
    expect(sessionKey('__bcdef0123456789abcdef012345678')).toBe('__bcdef0123456789abcdef012345678')
  })
})
