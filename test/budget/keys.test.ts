import { IdentityKeyCache, identityKey, windowKey } from '../../src/budget/keys'

describe('IdentityKeyCache', () => {
  test('gives the same key strings as windowKey(identityKey(...)), one per window in order', () => {
    const cache = new IdentityKeyCache([60, 86_400])
    const expected = [windowKey(identityKey('acme', 'alice'), 60), windowKey(identityKey('acme', 'alice'), 86_400)]
    expect(cache.keysOf('acme', 'alice')).toEqual(expected)
    expect(cache.keysOf('acme', 'alice')).toEqual(expected) // and again from the cache
  })

  test('keeps callers of different tenants apart, whatever their names hold', () => {
    const cache = new IdentityKeyCache([60])
    const pairs: Array<[string, string]> = [
      ['acme', 'alice'],
      ['globex', 'alice'],
      ['acme\u0000', 'alice'],
      ['acme', '\u0000alice'],
    ]
    const keys = pairs.map(([tenant, identity]) => cache.keysOf(tenant, identity)[0])
    expect(new Set(keys).size).toBe(pairs.length)
    pairs.forEach(([tenant, identity], i) => expect(keys[i]).toBe(windowKey(identityKey(tenant, identity), 60)))
  })

  test('forgets every caller once it holds its maximum, and still answers right', () => {
    const cache = new IdentityKeyCache([60], 3)
    for (const identity of ['a', 'b', 'c']) cache.keysOf('acme', identity)
    expect(cache.size).toBe(3)
    expect(cache.keysOf('acme', 'd')).toEqual([windowKey(identityKey('acme', 'd'), 60)])
    expect(cache.size).toBe(1)
    expect(cache.keysOf('acme', 'a')).toEqual([windowKey(identityKey('acme', 'a'), 60)])
    expect(cache.size).toBe(2)
  })
})
