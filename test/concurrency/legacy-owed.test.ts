import { LegacyOwed } from '../../src/concurrency/legacy-owed'
import { ConcurrencyLimiter } from '../../src/concurrency/limiter'
import { Exchange, type RpcCall } from '../../src/pipeline/exchange'

/** A request as the concurrency stage sees it at `server`: a GET stream, or a POST of one tools/call (id 1), answered 202. */
function exchange(server: string | null, method: 'GET' | 'POST', url: string): Exchange {
  const ex = new Exchange({ method, url, headers: {} } as never, {} as never, 'r', 0, 0)
  ex.server = server
  // Each server here has an origin of its own (route.ts: the scope of a server's sessions).
  ex.sessionScope = server === null ? null : `origin-of-${server}`
  if (method === 'POST') {
    ex.calls = [{ id: 1, method: 'tools/call', target: 'echo' } as RpcCall]
    ex.forwarded = true
    ex.status = 202
  }
  return ex
}

describe('LegacyOwed across servers', () => {
  test('a legacy POST owes its slot to the stream of its own server only, even when another server issued the same session id', () => {
    const limiter = new ConcurrencyLimiter(4)
    const owed = new LegacyOwed(limiter, () => 60_000)
    const streamA = exchange('a', 'GET', '/mcp/a')
    owed.onMessage(streamA, 'k', '/mcp/a/messages?sessionId=same')

    // Server b's session of the same id has no stream here: its POST owes nothing to a's stream.
    const atB = exchange('b', 'POST', '/mcp/b/messages?sessionId=same')
    expect(limiter.tryAcquire('k')).toBe(true)
    owed.admit(atB, 'k')
    expect(owed.keeps(atB)).toBe(false)
    limiter.release('k')

    // b's own stream of that id is tracked apart from a's (not taken for a second stream of one session).
    const streamB = exchange('b', 'GET', '/mcp/b')
    owed.onMessage(streamB, 'k', '/mcp/b/messages?sessionId=same')
    const again = exchange('b', 'POST', '/mcp/b/messages?sessionId=same')
    expect(limiter.tryAcquire('k')).toBe(true)
    owed.admit(again, 'k')
    expect(owed.keeps(again)).toBe(true)
    // a's stream answering id 1 settles nothing of b's; b's does.
    owed.onMessage(streamA, 'k', '{"jsonrpc":"2.0","id":1,"result":{}}')
    expect(limiter.inFlight('k')).toBe(1)
    owed.onMessage(streamB, 'k', '{"jsonrpc":"2.0","id":1,"result":{}}')
    expect(limiter.inFlight('k')).toBe(0)
  })
})
