import type { IncomingMessage, ServerResponse } from 'node:http'
import { LinkedList } from '../src/linked-list'
import { Exchange } from '../src/pipeline/exchange'

function exchange(id: string): Exchange {
  return new Exchange({ headers: {} } as IncomingMessage, {} as ServerResponse, id, 0, 0)
}

function ids(list: LinkedList<Exchange>): string[] {
  const out: string[] = []
  list.forEach((ex) => out.push(ex.requestId))
  return out
}

describe('LinkedList (the gateway requests in flight, nodes through their own links)', () => {
  it('holds what was added, most recent first, and counts it', () => {
    const list = new LinkedList<Exchange>()
    const [a, b, c] = [exchange('a'), exchange('b'), exchange('c')]
    list.push(a)
    list.push(b)
    list.push(c)
    expect(list.size).toBe(3)
    expect(ids(list)).toEqual(['c', 'b', 'a'])
  })

  it.each([
    ['the oldest', 'a', ['c', 'b']],
    ['one in the middle', 'b', ['c', 'a']],
    ['the newest', 'c', ['b', 'a']],
  ])('removes %s and keeps the rest linked', (_what, gone, left) => {
    const list = new LinkedList<Exchange>()
    const all = new Map(['a', 'b', 'c'].map((id) => [id, exchange(id)]))
    for (const ex of all.values()) list.push(ex)
    const removed = all.get(gone)!
    list.remove(removed)
    expect(ids(list)).toEqual(left)
    expect(list.size).toBe(2)
    // A finished request keeps no link to the others: it must not hold them alive.
    expect(removed.listPrev).toBeNull()
    expect(removed.listNext).toBeNull()
  })

  it('ignores a second delete and a request never added, so the count cannot drift', () => {
    const list = new LinkedList<Exchange>()
    const a = exchange('a')
    const b = exchange('b')
    list.push(a)
    list.push(b)
    list.remove(a)
    list.remove(a)
    list.remove(exchange('stranger'))
    expect(list.size).toBe(1)
    expect(ids(list)).toEqual(['b'])
    list.remove(b)
    expect(list.size).toBe(0)
    expect(ids(list)).toEqual([])
    // Empty again: adding works from scratch.
    list.push(a)
    expect(ids(list)).toEqual(['a'])
  })
})

describe('LinkedList ends (what the deadline queue and the token cache read)', () => {
  it('knows its oldest and newest node through pushes and removes, and clear() unlinks every node', () => {
    const list = new LinkedList<Exchange>()
    expect([list.oldest, list.newest]).toEqual([null, null])
    const [a, b, c] = [exchange('a'), exchange('b'), exchange('c')]
    list.push(a)
    list.push(b)
    list.push(c)
    expect([list.oldest?.requestId, list.newest?.requestId]).toEqual(['a', 'c'])
    list.remove(a)
    list.remove(c)
    expect([list.oldest?.requestId, list.newest?.requestId]).toEqual(['b', 'b'])
    // Moved to the newest end, as a cache hit does.
    list.push(a)
    list.remove(b)
    list.push(b)
    expect(ids(list)).toEqual(['b', 'a'])
    list.clear()
    expect(list.size).toBe(0)
    expect([a.listPrev, a.listNext, b.listPrev, b.listNext]).toEqual([null, null, null, null])
    // Cleared nodes can join again.
    list.push(b)
    expect(ids(list)).toEqual(['b'])
  })
})
