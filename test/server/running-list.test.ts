import type { IncomingMessage, ServerResponse } from 'node:http'
import { Exchange, RunningList } from '../../src/pipeline/exchange'

function exchange(id: string): Exchange {
  return new Exchange({ headers: {} } as IncomingMessage, {} as ServerResponse, id, 0, 0)
}

function ids(list: RunningList): string[] {
  const out: string[] = []
  list.forEach((ex) => out.push(ex.requestId))
  return out
}

describe('RunningList (the gateway requests in flight)', () => {
  it('holds what was added, most recent first, and counts it', () => {
    const list = new RunningList()
    const [a, b, c] = [exchange('a'), exchange('b'), exchange('c')]
    list.add(a)
    list.add(b)
    list.add(c)
    expect(list.size).toBe(3)
    expect(ids(list)).toEqual(['c', 'b', 'a'])
  })

  it.each([
    ['the oldest', 'a', ['c', 'b']],
    ['one in the middle', 'b', ['c', 'a']],
    ['the newest', 'c', ['b', 'a']],
  ])('removes %s and keeps the rest linked', (_what, gone, left) => {
    const list = new RunningList()
    const all = new Map(['a', 'b', 'c'].map((id) => [id, exchange(id)]))
    for (const ex of all.values()) list.add(ex)
    const removed = all.get(gone)!
    list.delete(removed)
    expect(ids(list)).toEqual(left)
    expect(list.size).toBe(2)
    // A finished request keeps no link to the others: it must not hold them alive.
    expect(removed.runningPrev).toBeNull()
    expect(removed.runningNext).toBeNull()
  })

  it('ignores a second delete and a request never added, so the count cannot drift', () => {
    const list = new RunningList()
    const a = exchange('a')
    const b = exchange('b')
    list.add(a)
    list.add(b)
    list.delete(a)
    list.delete(a)
    list.delete(exchange('stranger'))
    expect(list.size).toBe(1)
    expect(ids(list)).toEqual(['b'])
    list.delete(b)
    expect(list.size).toBe(0)
    expect(ids(list)).toEqual([])
    // Empty again: adding works from scratch.
    list.add(a)
    expect(ids(list)).toEqual(['a'])
  })
})
