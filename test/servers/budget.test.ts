import { execFile } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { promisify } from 'node:util'
import yaml from 'js-yaml'
import { serverKey } from '../../src/budget/keys'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { cliMain, freePort } from '../helpers/cli'
import { configFrom, tempDir } from '../helpers/harness'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { callOn, serverBudgetSuite, used } from './budget-suite'

serverBudgetSuite('memory store', () => Promise.resolve(new MemoryBudgetStore()))

describe('operating server budgets', () => {
  let h: ServersHarness | null = null
  afterEach(async () => {
    await h?.close()
    h = null
  })

  test('a reload keeps the counts of the servers it leaves unchanged, and of a changed server by its name', async () => {
    const store = new MemoryBudgetStore()
    const budget = {
      requests_per_window: 100,
      window_seconds: 60,
      servers: { docs: { requests_per_window: 2, window_seconds: 60 }, tickets: { requests_per_window: 2, window_seconds: 60 } },
    }
    h = await startServersHarness({ docs: {}, tickets: {} }, { features: { budget_enforcement: true }, budget }, { budgetStore: store })
    expect((await callOn(h, 'docs', 'alice')).status).toBe(200)
    expect((await callOn(h, 'tickets', 'alice')).status).toBe(200)
    const servers = h.tree.servers as Record<string, Record<string, unknown>>
    // tickets gets a header (a changed server), docs stays as it was; tickets' bucket doubles.
    const next = {
      ...h.tree,
      servers: { docs: servers.docs, tickets: { ...servers.tickets, headers: { 'X-Api-Key': 'k' } } },
      budget: { ...budget, servers: { ...budget.servers, tickets: { requests_per_window: 4, window_seconds: 60 } } },
    }
    expect(h.gateway.reload(configFrom(next, {}, dirname(h.auditFile)))).toEqual([])
    expect((await callOn(h, 'docs', 'bob')).status).toBe(200)
    const refused = await callOn(h, 'docs', 'carol')
    expect(refused.status).toBe(429)
    expect(refused.json?.error?.data?.bucket).toBe('server')
    expect(await used(store, serverKey('docs'))).toBe(2)
    // The new limit applies to the count kept: one call before, three more fit under 4.
    for (let i = 0; i < 3; i++) expect((await callOn(h, 'tickets', 'bob')).status).toBe(200)
    expect((await callOn(h, 'tickets', 'bob')).status).toBe(429)
  })

  test('a call the policy denies is checked against the server bucket but not charged to it', async () => {
    const store = new MemoryBudgetStore()
    h = await startServersHarness(
      { docs: {}, tickets: {} },
      {
        features: { budget_enforcement: true },
        budget: { servers: { docs: { requests_per_window: 1, window_seconds: 60 } } },
        policy: { default: 'allow', rules: [{ identity: 'mallory', tool: 'echo', effect: 'deny' }] },
      },
      { budgetStore: store },
    )
    for (let i = 0; i < 3; i++) expect((await callOn(h, 'docs', 'mallory')).status).toBe(403)
    expect(await used(store, serverKey('docs'))).toBe(0)
    expect((await callOn(h, 'docs', 'alice')).status).toBe(200)
    // Full now: a denied call over it gets 429, as over any shared bucket.
    expect((await callOn(h, 'docs', 'mallory')).status).toBe(429)
    expect(await used(store, serverKey('docs'))).toBe(1)
  })

  test('refusals are labelled with the tool of a <server>/<tool> key, not other', async () => {
    h = await startServersHarness(
      { docs: {}, tickets: {} },
      { features: { budget_enforcement: true }, budget: { tools: { 'docs/echo': { requests_per_window: 1, window_seconds: 60 } } } },
    )
    expect((await callOn(h, 'docs', 'alice')).status).toBe(200)
    expect((await callOn(h, 'docs', 'alice')).status).toBe(429)
    const metrics = await (await fetch(`${h.url}/metrics`)).text()
    expect(metrics).toMatch(/^wardline_refusals_by_tool_total\{[^}]*tool="echo"[^}]*\} 1$/m)
    expect(metrics).not.toMatch(/^wardline_refusals_by_tool_total\{[^}]*decision="throttled"[^}]*tool="other"[^}]*\} [1-9]/m)
  })

  test('GET /budgets and `wardline budget show` list server buckets and <server>/<tool> buckets', async () => {
    const token = 'admin-token-for-server-budgets-0123456789'
    const port = await freePort()
    const admin = { listen: `127.0.0.1:${port}`, token }
    h = await startServersHarness(
      { docs: {}, tickets: {} },
      {
        admin,
        features: { budget_enforcement: true },
        budget: {
          requests_per_window: 100,
          window_seconds: 60,
          tools: {
            'docs/echo': { requests_per_window: 5, window_seconds: 60 },
            'tickets/echo': { requests_per_window: 7, window_seconds: 60 },
          },
          servers: { docs: { requests_per_window: 10, window_seconds: 60 } },
        },
      },
    )
    expect((await callOn(h, 'docs', 'alice')).status).toBe(200)
    const get = async (query: string): Promise<Array<Record<string, unknown>>> => {
      const res = await fetch(`http://127.0.0.1:${port}/budgets${query}`, { headers: { authorization: `Bearer ${token}` } })
      expect(res.status).toBe(200)
      return ((await res.json()) as { buckets: Array<Record<string, unknown>> }).buckets
    }
    const brief = (b: Record<string, unknown>): unknown[] => [b.kind, b.server, b.name, b.limit, b.used]
    expect((await get('')).map(brief)).toEqual([
      ['tool', 'docs', 'echo', 5, 1],
      ['tool', 'tickets', 'echo', 7, 0],
      ['server', 'docs', 'docs', 10, 1],
    ])
    expect((await get('?server=docs')).map(brief)).toEqual([
      ['server', 'docs', 'docs', 10, 1],
      ['tool', 'docs', 'echo', 5, 1],
    ])
    expect((await get('?tool=echo')).map(brief)).toEqual([
      ['tool', 'docs', 'echo', 5, 1],
      ['tool', 'tickets', 'echo', 7, 0],
    ])
    expect((await get('?tool=tickets/echo')).map(brief)).toEqual([['tool', 'tickets', 'echo', 7, 0]])
    expect((await get('?kind=server')).map(brief)).toEqual([['server', 'docs', 'docs', 10, 1]])

    const configFile = join(tempDir(), 'wardline.yaml')
    writeFileSync(configFile, yaml.dump(h.tree))
    // Run beside this process's event loop, which serves the admin API it calls.
    const r = await promisify(execFile)(process.execPath, [cliMain(), 'budget', 'show', '--config', configFile])
    expect(r.stderr).toBe('')
    const rows = r.stdout
      .trimEnd()
      .split('\n')
      .slice(2)
      .map((line) => line.split(/\s+/).slice(0, 5))
    expect(rows).toEqual([
      ['tool', 'docs/echo', '60s', '5', '1'],
      ['tool', 'tickets/echo', '60s', '7', '0'],
      ['server', 'docs', '60s', '10', '1'],
    ])

    // A reset by server forgets its bucket and its tools' buckets; with an identity it keeps the shared one.
    const reset = async (query: string): Promise<unknown[][]> => {
      const res = await fetch(`http://127.0.0.1:${port}/budgets${query}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${token}` },
      })
      expect(res.status).toBe(200)
      return ((await res.json()) as { reset: Array<Record<string, unknown>> }).reset.map(brief)
    }
    expect(await reset('?identity=alice&tenant=acme&server=docs')).toEqual([['identity', undefined, 'alice', 100, 1]])
    expect((await get('?server=docs')).map((b) => b.used)).toEqual([1, 1])
    expect(await reset('?server=docs')).toEqual([
      ['server', 'docs', 'docs', 10, 1],
      ['tool', 'docs', 'echo', 5, 1],
    ])
    expect((await get('')).map((b) => b.used)).toEqual([0, 0, 0])
  })
})
