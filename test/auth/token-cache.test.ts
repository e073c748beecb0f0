import { TokenCache } from '../../src/auth/token-cache'

const alice = { identity: 'alice', tenant: 'acme' }
const bob = { identity: 'bob', tenant: 'acme' }

describe('verified-token cache', () => {
  test('a cached token is served until its exp and never at or after it', () => {
    let now = 1_000_000
    const cache = new TokenCache(10, () => now)
    cache.set('t1', alice, 1_060) // exp 1060 s = 1 060 000 ms
    now = 1_059_999
    expect(cache.get('t1')).toBe(alice)
    now = 1_060_000
    expect(cache.get('t1')).toBeUndefined()
    expect(cache.size).toBe(0)
  })

  test('a token without exp, or already expired, is not kept', () => {
    const cache = new TokenCache(10, () => 5_000_000)
    cache.set('no-exp', alice, undefined)
    cache.set('expired', alice, 4_000)
    expect(cache.get('no-exp')).toBeUndefined()
    expect(cache.get('expired')).toBeUndefined()
    expect(cache.size).toBe(0)
  })

  test('past its bound it drops the least recently used token, not the oldest inserted', () => {
    const cache = new TokenCache(2, () => 0)
    cache.set('a', alice, 100)
    cache.set('b', bob, 100)
    expect(cache.get('a')).toBe(alice) // a is now the most recently used
    cache.set('c', bob, 100)
    expect(cache.size).toBe(2)
    expect(cache.get('b')).toBeUndefined()
    expect(cache.get('a')).toBe(alice)
    expect(cache.get('c')).toBe(bob)
  })

  test('an expired entry that is looked up leaves the recency order too: the next eviction takes the least recently used live one', () => {
    let now = 0
    const cache = new TokenCache(2, () => now)
    cache.set('short', alice, 10)
    cache.set('b', bob, 100)
    now = 10_000
    expect(cache.get('short')).toBeUndefined()
    cache.set('c', alice, 100)
    cache.set('d', bob, 100) // over the bound: b goes, not a ghost of 'short'
    expect([cache.get('b'), cache.get('c'), cache.get('d'), cache.size]).toEqual([undefined, alice, bob, 2])
  })

  test('setting a key again replaces its entry and makes it the most recently used', () => {
    let now = 0
    const cache = new TokenCache(2, () => now)
    cache.set('a', alice, 100)
    cache.set('b', bob, 100)
    cache.set('a', bob, 50)
    expect(cache.size).toBe(2)
    cache.set('c', alice, 100) // b is now the least recently used
    expect([cache.get('a'), cache.get('b'), cache.get('c')]).toEqual([bob, undefined, alice])
    now = 50_000 // the replacement's exp counts, not the first one's
    expect(cache.get('a')).toBeUndefined()
  })

  test('clear empties it, and it fills and evicts again from scratch', () => {
    const cache = new TokenCache(2, () => 0)
    cache.set('a', alice, 100)
    cache.set('b', bob, 100)
    cache.clear()
    expect([cache.size, cache.get('a'), cache.get('b')]).toEqual([0, undefined, undefined])
    cache.set('c', alice, 100)
    cache.set('d', bob, 100)
    cache.set('e', alice, 100)
    expect([cache.get('c'), cache.get('d'), cache.get('e'), cache.size]).toEqual([undefined, bob, alice, 2])
  })

  test('over a long mixed sequence it keeps exactly the entries a reference LRU keeps, and answers as it does', () => {
    let now = 0
    const bound = 8
    const cache = new TokenCache(bound, () => now)
    // The reference: an array from least to most recently used, with each key's expiry in ms.
    let model: Array<{ key: string; principal: typeof alice; expiresAt: number }> = []
    const wrong: string[] = []
    let seed = 7
    const random = (n: number): number => ((seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff) >>> 16) % n
    for (let step = 0; step < 20_000; step++) {
      const key = `k${random(20)}`
      const found = model.findIndex((e) => e.key === key)
      const op = random(10)
      if (op < 6) {
        let expected: typeof alice | undefined
        if (found >= 0) {
          const [entry] = model.splice(found, 1)
          if (now < entry.expiresAt) {
            model.push(entry)
            expected = entry.principal
          }
        }
        if (cache.get(key) !== expected) wrong.push(`step ${step}: get ${key}`)
      } else if (op < 9) {
        const principal = random(2) === 0 ? alice : bob
        const expSeconds = Math.floor(now / 1000) + random(30) - 2
        cache.set(key, principal, expSeconds)
        if (expSeconds * 1000 > now) {
          model = model.filter((e) => e.key !== key)
          model.push({ key, principal, expiresAt: expSeconds * 1000 })
          if (model.length > bound) model.shift()
        }
      } else {
        now += random(3_000)
      }
      if (cache.size !== model.length) wrong.push(`step ${step}: size ${cache.size}, not ${model.length}`)
    }
    expect(wrong).toEqual([])
  })

  test("keys that end alike answer only for themselves: a lookup never gets another key's principal", () => {
    const cache = new TokenCache(10, () => 0)
    const end = '.the-same-sixteen-char-end'.slice(-16)
    cache.set(`Bearer alice${end}`, alice, 100)
    expect(cache.get(`Bearer mallory${end}`)).toBeUndefined()
    expect(cache.get(end)).toBeUndefined()
    expect(cache.get(`Bearer alice${end}`)).toBe(alice)
    cache.set(`Bearer bob${end}`, bob, 100)
    expect(cache.get(`Bearer bob${end}`)).toBe(bob)
    // Kept, or replaced by the later key (one verification more when next seen): never answered with bob.
    expect([undefined, alice]).toContain(cache.get(`Bearer alice${end}`))
    expect(cache.get(`Bearer bob${end}`)).toBe(bob)
  })

  test('a size of 0 disables caching', () => {
    const cache = new TokenCache(0, () => 0)
    cache.set('a', alice, 100)
    expect(cache.get('a')).toBeUndefined()
  })
})
