import { dirname } from 'node:path'
import { MCP_HEADERS, as, configFrom, rpc } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

const INIT = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }, 0)

/**
 * Reloads racing with requests: each request reaches its server with one whole set of that server's
 * headers (the old or the new, never both, never none, never another server's), a server removed
 * mid-flight answers 404 only to requests that start after, and every request is audited once.
 */
describe('red team: reloads racing with requests', () => {
  let h: ServersHarness
  beforeAll(async () => {
    h = await startServersHarness(
      { docs: { headers: { 'X-Api-Key': 'docs-0' } }, tickets: { headers: { 'X-Api-Key': 'tickets-0' } } },
      { upstream_health_check: { enabled: false } },
    )
  })
  afterAll(() => h.close())

  test('40 reloads (headers rotated, tickets removed and added back) under 400 concurrent requests', async () => {
    const servers = h.tree.servers as Record<string, Record<string, unknown>>
    const dir = dirname(h.auditFile)
    const seenBefore = { docs: h.upstreams.docs.seen.length, tickets: h.upstreams.tickets.seen.length }
    let reloads = 0
    let stop = false
    const reloader = (async () => {
      while (!stop && reloads < 40) {
        reloads++
        const docs = { ...servers.docs, headers: { 'X-Api-Key': `docs-${reloads}` } }
        const next =
          reloads % 3 === 0
            ? { ...h.tree, servers: { docs } }
            : { ...h.tree, servers: { docs, tickets: { ...servers.tickets, headers: { 'X-Api-Key': `tickets-${reloads}` } } } }
        expect(h.gateway.reload(configFrom(next, {}, dir))).toEqual([])
        await new Promise((r) => setTimeout(r, 5))
      }
    })()
    const replies = await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        send(`${h.url}/mcp/${i % 2 === 0 ? 'docs' : 'tickets'}`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(INIT)),
      ),
    )
    stop = true
    await reloader
    expect(reloads).toBeGreaterThan(1)
    for (const [i, r] of replies.entries()) expect(i % 2 === 0 ? [200] : [200, 404]).toContain(r.status)
    const docsSeen = h.upstreams.docs.seen.slice(seenBefore.docs).filter((s) => s.method === 'POST')
    const ticketsSeen = h.upstreams.tickets.seen.slice(seenBefore.tickets).filter((s) => s.method === 'POST')
    expect(docsSeen).toHaveLength(200)
    expect(ticketsSeen).toHaveLength(replies.filter((r, i) => i % 2 === 1 && r.status === 200).length)
    for (const s of docsSeen) expect(s.headers['x-api-key']).toMatch(/^docs-\d+$/)
    for (const s of ticketsSeen) expect(s.headers['x-api-key']).toMatch(/^tickets-\d+$/)
    const audit = await h.audit()
    for (const [i, r] of replies.entries()) {
      const mine = audit.filter((e) => e.request_id === r.headers['x-wardline-request-id'])
      expect(mine).toHaveLength(1)
      if (r.status === 200) expect(mine[0].server).toBe(i % 2 === 0 ? 'docs' : 'tickets')
      else expect(mine[0].reason_code).toBe('route.unknown_server')
    }
  })
})
