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

  test('a size of 0 disables caching', () => {
    const cache = new TokenCache(0, () => 0)
    cache.set('a', alice, 100)
    expect(cache.get('a')).toBeUndefined()
  })
})
