/**
 * Budgets with several servers, read from the file: tool keys are `<server>/<tool>`, `budget.servers`
 * names servers; with `upstream:` alone a tool key is a tool's name as before, `/` included. And the
 * keys and fingerprints those names make never collide.
 */
import { labelledNames } from '../../src/audit/metrics'
import { throttledAgentText } from '../../src/budget/agent-text'
import { budgetPlan, serverPlan } from '../../src/budget/buckets'
import { callFingerprint } from '../../src/budget/call-fingerprint'
import { identityKey, serverKey, tenantKey, toolKey, windowKey } from '../../src/budget/keys'
import { parseConfig } from '../../src/config/load'
import { configProblems } from '../helpers/harness'

const SERVERS =
  'servers:\n  docs: { url: http://127.0.0.1:3001/mcp }\n  tickets: { url: http://127.0.0.1:3002/mcp }\nauth: { mode: header }\n'
const UPSTREAM = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'

describe('budget.tools and budget.servers with servers', () => {
  test('a bare tool name is an error that names the right form', () => {
    expect(configProblems(SERVERS + 'budget:\n  tools:\n    search: { requests_per_window: 5, window_seconds: 60 }\n')).toEqual([
      'budget.tools.search: with servers, tool buckets are named <server>/<tool>: write docs/search or tickets/search',
    ])
  })

  test('a server that is not in servers is an error, in a tool key and in budget.servers', () => {
    expect(
      configProblems(
        SERVERS +
          'budget:\n  tools:\n    nope/search: { requests_per_window: 5, window_seconds: 60 }\n    Docs/search: { cost: 2 }\n    docs/: { cost: 2 }\n' +
          '  servers:\n    wiki: { requests_per_window: 5, window_seconds: 60 }\n',
      ),
    ).toEqual([
      'budget.tools.nope/search: "nope" is not one of servers (docs, tickets): tool buckets are named <server>/<tool>',
      'budget.tools.Docs/search: "Docs" is not one of servers (docs, tickets): tool buckets are named <server>/<tool>',
      'budget.tools.docs/: names no tool after "docs/"',
      'budget.servers.wiki: must name one of servers (docs, tickets)',
    ])
  })

  test('budget.servers with upstream alone is an error; a blank server bucket too', () => {
    expect(configProblems(UPSTREAM + 'budget:\n  servers:\n    docs: { requests_per_window: 5, window_seconds: 60 }\n')).toEqual([
      'budget.servers: is only used with servers (with upstream alone, limit the whole gateway with budget.limits or budget.tenants)',
    ])
    expect(configProblems(SERVERS + 'budget:\n  servers:\n    docs:\n')).toEqual([
      'budget.servers.docs: must set requests_per_window and window_seconds, or limits',
    ])
    expect(configProblems(SERVERS + 'budget:\n  servers:\n    docs: { requests_per_window: 0, window_seconds: 60 }\n')).toHaveLength(1)
  })

  test('<server>/<tool> splits at the first /: the tool keeps any / of its own; server buckets take the pair or limits', () => {
    const config = parseConfig(
      SERVERS +
        'budget:\n  requests_per_window: 9\n  window_seconds: 30\n  tools:\n    docs/a/b: { requests_per_window: 5, window_seconds: 60, cost: 2 }\n' +
        '  servers:\n    docs: { requests_per_window: 50 }\n    tickets: { limits: [{ requests_per_window: 10, window_seconds: 60 }, { requests_per_window: 100, window_seconds: 3600 }] }\n',
      { env: {}, baseDir: '/srv' },
    )
    expect(config.budget.tools['docs/a/b']).toEqual({
      limits: [{ requestsPerWindow: 5, windowSeconds: 60 }],
      cost: 2,
      server: 'docs',
      tool: 'a/b',
    })
    expect(config.budget.servers).toEqual({
      docs: [{ requestsPerWindow: 50, windowSeconds: 30 }],
      tickets: [
        { requestsPerWindow: 10, windowSeconds: 60 },
        { requestsPerWindow: 100, windowSeconds: 3600 },
      ],
    })
    const plan = budgetPlan(config.budget)
    expect(plan.tools.size).toBe(0)
    expect(serverPlan(plan, 'docs').tools.get('a/b')?.windows[0].key).toBe(windowKey(toolKey('a/b', 'docs'), 60))
    expect(serverPlan(plan, 'tickets').tools.size).toBe(0)
    expect(serverPlan(plan, 'tickets').windows.map((w) => w.label)).toEqual(['server-60s', 'server-3600s'])
    expect(serverPlan(plan, 'docs').windows.map((w) => [w.label, w.key])).toEqual([['server', windowKey(serverKey('docs'), 30)]])
    // Refusals are labelled by the tool name calls carry, not the key.
    expect(labelledNames(config.budget, null).tools).toEqual(['a/b'])
  })

  test('with upstream alone a tool key with / is that tool, as it always was', () => {
    const config = parseConfig(UPSTREAM + 'budget:\n  tools:\n    docs/search: { requests_per_window: 5, window_seconds: 60 }\n', {
      env: {},
      baseDir: '/srv',
    })
    expect(config.budget.tools['docs/search']).toMatchObject({ server: null, tool: 'docs/search' })
    const plan = budgetPlan(config.budget)
    expect(serverPlan(plan, null).tools.get('docs/search')?.windows[0].key).toBe(windowKey(toolKey('docs/search'), 60))
    expect(toolKey('docs/search')).toBe('["tool","docs/search"]') // the key today's counts are under
    expect(labelledNames(config.budget, null).tools).toEqual(['docs/search'])
  })
})

describe('bucket keys with servers', () => {
  test('no two of tool, server-scoped tool, server, tenant and identity keys collide, windowed or not', () => {
    const bases = [
      toolKey('a/b', 'x'),
      toolKey('b', 'x/a'),
      toolKey('x'),
      toolKey('x/a/b'),
      toolKey('60', 'x'),
      toolKey('x', 'a'),
      toolKey('a', 'x'),
      serverKey('x'),
      serverKey('a'),
      tenantKey('x'),
      identityKey('x', 'a'),
      identityKey('tool', 'x'),
    ]
    const keys = [...bases, ...bases.flatMap((k) => [windowKey(k, 60), windowKey(k, 3600)])]
    expect(new Set(keys).size).toBe(keys.length)
    // A windowed upstream tool key against an unwindowed scoped one: the window is a number, never a string.
    expect(windowKey(toolKey('x'), 60)).not.toBe(toolKey('60', 'x'))
  })

  test('the repeat fingerprint includes the server: the same call on two servers is two calls; none keeps today’s', () => {
    const body = Buffer.from('{"q":1}')
    const none = callFingerprint('search', body, 0, body.length)
    const docs = callFingerprint('search', body, 0, body.length, 'docs')
    const tickets = callFingerprint('search', body, 0, body.length, 'tickets')
    expect(new Set([none, docs, tickets]).size).toBe(3)
    expect(callFingerprint('search', body, 0, body.length, null)).toBe(none)
    // The server cannot be smuggled into a tool name: "docs" + "search" is not the tool `docs""search`.
    expect(callFingerprint('docs""search', body, 0, body.length)).not.toBe(docs)
    expect(callFingerprint('"docs""search"', body, 0, body.length)).not.toBe(docs)
  })
})

describe("a server bucket's refusal as a model reads it", () => {
  const facts = { tool: 'search', limit: 600, windowSeconds: 60, cost: 1, weighted: false, retryAfterSeconds: 42, never: false }

  test('names the server, quoted, and says its callers share it', () => {
    expect(throttledAgentText({ ...facts, kind: 'server', server: 'docs' })).toBe(
      'Rate limit: 600 calls per 60 s for MCP server "docs", shared by all its callers. Try again in 42 s.',
    )
    expect(throttledAgentText({ ...facts, kind: 'server', server: 'docs', cost: 700, never: true })).toBe(
      'This call costs 700 units, more than the 600 units per 60 s that MCP server "docs" is allowed: it can never succeed. Do not retry it.',
    )
  })

  test("a tool's text is as it was", () => {
    expect(throttledAgentText({ ...facts, kind: 'tool', server: 'docs' })).toBe(
      'Rate limit: 600 calls per 60 s for tool "search". Try again in 42 s.',
    )
  })
})
