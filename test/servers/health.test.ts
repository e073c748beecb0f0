import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { MCP_HEADERS, as, metricSample, rpc } from '../helpers/harness'
import { type ServersHarness, startServersHarness } from '../helpers/servers'
import { waitFor } from '../helpers/wait'

/**
 * /readyz with several servers (each probed every 50 ms): it names every server and the cause of
 * each one that is down, stays 200 while one is up, and a down server fails only its own callers.
 */

interface ServersCheck {
  readonly ok: boolean
  readonly down: string[]
  readonly servers: Record<string, { ok: boolean; cause?: string; url?: string; probe?: string }>
}

async function readyz(h: ServersHarness): Promise<{ status: number; status_text: string; servers: ServersCheck }> {
  const res = await fetch(`${h.url}/readyz`)
  const body = (await res.json()) as { status: string; checks: { servers: ServersCheck } }
  return { status: res.status, status_text: body.status, servers: body.checks.servers }
}

/** A connected SDK client of server `name` (through the gateway). */
async function clientOf(h: ServersHarness, name: string): Promise<Client> {
  const client = new Client({ name: 't', version: '1' })
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp/${name}`), { requestInit: { headers: as('alice') } }))
  return client
}

async function echo(client: Client, text: string): Promise<string> {
  const result = (await client.callTool({ name: 'echo', arguments: { text } })) as { content: { text: string }[] }
  return result.content[0].text
}

const PROBE = { upstream_health_check: { interval_seconds: 0.05, timeout_seconds: 1 } }

describe('/readyz and one server down', () => {
  let h: ServersHarness
  beforeAll(async () => {
    h = await startServersHarness({ docs: {}, tickets: {} }, PROBE)
  })
  afterAll(() => h.close())

  test('every server up: 200, each named with its probe, none down', async () => {
    const r = await readyz(h)
    expect(r.status).toBe(200)
    expect(r.servers.ok).toBe(true)
    expect(r.servers.down).toEqual([])
    expect(Object.keys(r.servers.servers)).toEqual(['docs', 'tickets'])
    for (const name of ['docs', 'tickets']) {
      expect(r.servers.servers[name]).toMatchObject({ ok: true, url: `${h.upstreams[name].url}/mcp` })
      expect(r.servers.servers[name].cause).toBeUndefined()
    }
  })

  test('one stopped: still 200, it is named down with its cause, its callers get 502, the other is untouched; both stopped: 503', async () => {
    const docs = await clientOf(h, 'docs')
    expect(await echo(docs, 'before')).toBe('before')
    await h.upstreams.tickets.close()
    const r = await waitFor(
      async () => {
        const x = await readyz(h)
        // A probe cut by the close says `connection closed`; the next ones find nothing listening.
        return x.servers.servers.tickets.cause?.includes('refused') === true ? x : null
      },
      { what: 'the probe to find tickets down' },
    )
    expect(r.status).toBe(200)
    expect(r.status_text).toBe('ready')
    expect(r.servers.ok).toBe(true)
    expect(r.servers.down).toEqual(['tickets'])
    expect(r.servers.servers.tickets.ok).toBe(false)
    expect(r.servers.servers.tickets.cause).toMatch(/refused/)
    expect(r.servers.servers.docs.ok).toBe(true)
    // Its own callers: 502, as with `upstream:`.
    const reply = await fetch(`${h.url}/mcp/tickets`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } })),
    })
    expect(reply.status).toBe(502)
    await reply.arrayBuffer()
    // The other server's callers: served on the session they had, and on a new one.
    expect(await echo(docs, 'during')).toBe('during')
    const fresh = await clientOf(h, 'docs')
    expect(await echo(fresh, 'new')).toBe('new')
    await fresh.close()
    // And the metrics say which: the probe and the failure count of tickets alone.
    expect(await metricSample(h.url, 'wardline_upstream_up{server="tickets"}')).toBe(0)
    expect(await metricSample(h.url, 'wardline_upstream_up{server="docs"}')).toBe(1)
    expect(await metricSample(h.url, 'wardline_upstream_errors_total{kind="unreachable",server="tickets"}')).toBe(1)
    expect(await metricSample(h.url, 'wardline_upstream_errors_total{kind="unreachable",server="docs"}')).toBe(0)
    expect(await metricSample(h.url, 'wardline_requests_total{decision="error",server="tickets"}')).toBe(1)
    expect(await metricSample(h.url, 'wardline_requests_total{decision="error",server="docs"}')).toBe(0)
    expect(await metricSample(h.url, 'wardline_ready')).toBe(1)
    await docs.close()

    await h.upstreams.docs.close()
    const none = await waitFor(
      async () => {
        const x = await readyz(h)
        return x.status === 503 && x.servers.servers.docs.cause?.includes('refused') === true ? x : null
      },
      { what: 'the probe to find docs down too' },
    )
    expect(none.status_text).toBe('not_ready')
    expect(none.servers.ok).toBe(false)
    expect(none.servers.down).toEqual(['docs', 'tickets'])
    expect(none.servers.servers.docs.ok).toBe(false)
    expect(none.servers.servers.docs.cause).toMatch(/refused/)
    expect(await metricSample(h.url, 'wardline_ready')).toBe(0)
  })
})

test('a server whose probe does not count for readiness is listed down but leaves /readyz 200 even alone', async () => {
  const h = await startServersHarness(
    { docs: { health_check: { interval_seconds: 0.05, affects_readiness: false } }, tickets: {} },
    { upstream_health_check: { interval_seconds: 0.05 } },
  )
  try {
    await h.upstreams.docs.close()
    const r = await waitFor(
      async () => {
        const x = await readyz(h)
        return x.servers.down.length > 0 ? x : null
      },
      { what: 'the probe to find docs down' },
    )
    expect(r.status).toBe(200)
    expect(r.servers.down).toEqual(['docs'])
    expect(r.servers.servers.docs).toMatchObject({ ok: false, affects_readiness: false })
    // tickets down as well: the one probe that counts fails, so the gateway is not ready.
    await h.upstreams.tickets.close()
    await waitFor(async () => (await readyz(h)).status === 503, { what: 'tickets down' })
    expect((await readyz(h)).servers.down).toEqual(['docs', 'tickets'])
  } finally {
    await h.close()
  }
})

test("one server's slowness does not starve another's connections: each has its own pool", async () => {
  // docs has one connection, held by a slow call; tickets answers meanwhile, and so does docs after.
  const h = await startServersHarness({ docs: { connections: 1 }, tickets: { connections: 1 } })
  try {
    const docs = await clientOf(h, 'docs')
    const tickets = await clientOf(h, 'tickets')
    const started = performance.now()
    const slow = docs.callTool({ name: 'count_slowly', arguments: { n: 1, delay_ms: 1500 } })
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(await echo(tickets, 'quick')).toBe('quick')
    expect(performance.now() - started).toBeLessThan(1400)
    expect(((await slow) as { content: { text: string }[] }).content[0].text).toBe('counted to 1')
    await docs.close()
    await tickets.close()
  } finally {
    await h.close()
  }
})
