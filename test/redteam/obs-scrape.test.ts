import type { Server } from 'node:net'
import { join } from 'node:path'
import type { Pool } from 'pg'
import { MCP_HEADERS, as, startHarness, tempDir, toolCall, type Harness } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

/**
 * Red team (obs): /metrics evaluates wardline_ready at scrape time. Does a scrape ever cost the
 * database more than /readyz, and can a flood of scrapes (or scrapes waiting on a hung database)
 * hold up anything else the gateway serves?
 */
let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(2)))
afterAll(() => closeTestDatabase({ db, pool }))

async function gatewayBehind(proxy: PostgresProxy): Promise<Harness> {
  const dir = tempDir()
  return startHarness({
    mode: 'stateless-json',
    config: {
      features: { postgres_storage: true },
      postgres: { dsn: proxy.urlFor(db.url), max_connections: 2 },
      audit: { output: join(dir, 'audit.jsonl'), spill_file: join(dir, 'spill.jsonl') },
    },
  })
}

/** New TCP connections the proxy accepts while `run` runs (each readiness ping opens its own), and how long it ran. */
async function connectionsDuring(proxy: PostgresProxy, run: () => Promise<void>): Promise<{ connections: number; seconds: number }> {
  let connections = 0
  const server = (proxy as unknown as { server: Server }).server
  const count = (): void => void connections++
  server.on('connection', count)
  const started = performance.now()
  try {
    await run()
  } finally {
    server.off('connection', count)
  }
  return { connections, seconds: (performance.now() - started) / 1000 }
}

async function burst(url: string, n: number): Promise<string[]> {
  return Promise.all(Array.from({ length: n }, async () => (await fetch(url)).text()))
}

test('200 concurrent scrapes open no more database connections than 200 concurrent /readyz probes: about one ping a second', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const h = await gatewayBehind(proxy)
  try {
    await waitFor(async () => (await fetch(`${h.url}/readyz`)).status === 200, { what: 'ready' })
    const scrapes = await connectionsDuring(proxy, async () => {
      const texts = await burst(`${h.url}/metrics`, 200)
      for (const t of texts) expect(t).toContain('\nwardline_ready 1\n')
    })
    const probes = await connectionsDuring(proxy, async () => void (await burst(`${h.url}/readyz`, 200)))
    // One ping per second at most (plus one for the burst's start, and one for a pool connection that
    // may be replaced meanwhile); one ping per request would be 200.
    expect(scrapes.connections).toBeLessThanOrEqual(3 + Math.floor(scrapes.seconds))
    expect(probes.connections).toBeLessThanOrEqual(3 + Math.floor(probes.seconds))
  } finally {
    await h.close()
    await proxy.close()
  }
})

test('scrapes waiting on a hung database hold up neither calls nor /healthz, share one ping, and answer wardline_ready 0', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const h = await gatewayBehind(proxy)
  try {
    await waitFor(async () => (await fetch(`${h.url}/readyz`)).status === 200, { what: 'ready' })
    // Past the shared result's 1 s, so the flood starts a fresh ping that cannot be answered.
    await new Promise((r) => setTimeout(r, 1100))
    proxy.pause()
    const { connections, seconds } = await connectionsDuring(proxy, async () => {
      const scrapes = Array.from({ length: 150 }, async () => {
        const res = await fetch(`${h.url}/metrics`)
        const text = await res.text()
        return { status: res.status, text }
      })
      // While every scrape waits on the ping:
      expect((await fetch(`${h.url}/healthz`)).status).toBe(200)
      const call = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...as('alice') },
        body: JSON.stringify(toolCall('echo', { text: 'hi' })),
      })
      expect(call.status).toBe(200)
      expect(await call.text()).toContain('hi')
      for (const s of await Promise.all(scrapes)) {
        expect(s.status).toBe(200)
        expect(s.text).toContain('\nwardline_ready 0\n')
      }
    })
    // Pings share: one in flight at a time, each bounded at 2 s (plus one pool connection the call's audit entry may open).
    expect(connections).toBeLessThanOrEqual(2 + Math.floor(seconds / 2))
  } finally {
    proxy.resume()
    await h.close()
    await proxy.close()
  }
})
