import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Pool } from 'pg'
import { ServerMetrics } from '../../src/server/metrics'
import type { ReadinessCheck } from '../../src/readiness'
import { localRoutes } from '../../src/server/routes'
import { MCP_HEADERS, as, metricSample, startHarness, tempDir, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'
import { statSync } from 'node:fs'
import { join } from 'node:path'

/** wardline_ready and wardline_audit_spill_bytes, the gauges the NotReady and AuditSpillPending alerts read. */
let db: TestDatabase
let pool: Pool

beforeAll(async () => ({ db, pool } = await openTestDatabase(2)))
afterAll(() => closeTestDatabase({ db, pool }))

test('wardline_ready is 1 while serving and 0 as soon as shutdown begins, while the listener still answers', async () => {
  const h = await startHarness({ mode: 'stateless-json', config: { shutdown_delay_seconds: 2 } })
  try {
    expect(await metricSample(h.url, 'wardline_ready')).toBe(1)
    const stopping = h.gateway.shutdown()
    expect(await metricSample(h.url, 'wardline_ready')).toBe(0)
    expect((await fetch(`${h.url}/readyz`)).status).toBe(503)
    await stopping
  } finally {
    await h.close()
  }
})

test('with Postgres: wardline_ready follows the database, and the spill backlog shows in wardline_audit_spill_bytes until replayed', async () => {
  const proxy = await PostgresProxy.start(db.url)
  const dir = tempDir()
  const h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { postgres_storage: true },
      postgres: { dsn: proxy.urlFor(db.url), max_connections: 2 },
      audit: { output: join(dir, 'audit.jsonl'), spill_file: join(dir, 'spill.jsonl') },
    },
  })
  try {
    await waitFor(async () => (await metricSample(h.url, 'wardline_ready')) === 1, { what: 'wardline_ready 1' })
    proxy.refuse() // the database goes away
    await waitFor(async () => (await metricSample(h.url, 'wardline_ready')) === 0, {
      what: 'wardline_ready 0 once the database refuses connections',
      intervalMs: 200,
    })
    expect((await fetch(`${h.url}/readyz`)).status).toBe(503)

    // Calls go on; their audit entries end up in the spill file, and the gauge says how many bytes wait.
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...as('alice') },
        body: JSON.stringify(toolCall('echo', {}, i)),
      })
      expect(res.status).toBe(200)
      await res.arrayBuffer()
    }
    await waitFor(async () => (await metricSample(h.url, 'wardline_audit_spilled_total{sink="postgres"}')) >= 5, {
      what: 'all five entries to be spilled',
      timeoutMs: 20_000,
      intervalMs: 200,
    })
    const spilled = await metricSample(h.url, 'wardline_audit_spill_bytes{sink="postgres"}')
    // What waits on disk, byte for byte (no replay can run while the database refuses).
    expect(spilled).toBe(fileSize(join(dir, 'spill.jsonl')) + fileSize(join(dir, 'spill.jsonl.replaying')))
    expect(spilled).toBeGreaterThan(5 * 100) // five JSON lines of a hundred-odd bytes each

    proxy.allow() // back: the replay empties the file and the gauge returns to 0
    await waitFor(async () => (await metricSample(h.url, 'wardline_audit_spill_bytes{sink="postgres"}')) === 0, {
      what: 'the spill backlog to be replayed',
      timeoutMs: 20_000,
      intervalMs: 200,
    })
    await waitFor(async () => (await metricSample(h.url, 'wardline_ready')) === 1, { what: 'wardline_ready 1 again', intervalMs: 200 })
    const rows = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_entries')
    expect(rows.rows[0].n).toBeGreaterThanOrEqual(5)
  } finally {
    await h.close()
    await proxy.close()
  }
}, 60_000)

function fileSize(path: string): number {
  try {
    return statSync(path).size
  } catch {
    return 0
  }
}

test('a scrape asks the same shared checks as /readyz: 50 scrapes and 50 probes within a second cost one check', async () => {
  let checks = 0
  let healthy = true
  const database: ReadinessCheck = {
    name: 'postgres',
    check: async () => {
      checks++
      await new Promise((resolve) => setImmediate(resolve))
      return { ok: healthy }
    },
  }
  let now = 0
  const metrics = new ServerMetrics()
  const routes = localRoutes({
    metrics,
    readiness: [database],
    isShuttingDown: () => false,
    beforeMetrics: () => undefined,
    resourceMetadata: null,
    now: () => now,
  })
  const server = createServer((req, res) => {
    if (!routes.handle(req, res)) res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  try {
    const answers = await Promise.all([
      ...Array.from({ length: 50 }, () => fetch(`${url}/metrics`).then((r) => r.text())),
      ...Array.from({ length: 50 }, () => fetch(`${url}/readyz`).then((r) => String(r.status))),
    ])
    expect(checks).toBe(1)
    expect(answers.slice(0, 50).every((text) => /^wardline_ready 1$/m.test(text))).toBe(true)
    expect(answers.slice(50).every((status) => status === '200')).toBe(true)

    healthy = false
    now += 999 // still within the reused result's second: no new check, the same answer
    expect(await metricSample(url, 'wardline_ready')).toBe(1)
    expect(checks).toBe(1)
    now += 1 // a second after the check started: the next scrape runs one
    expect(await metricSample(url, 'wardline_ready')).toBe(0)
    expect((await fetch(`${url}/readyz`)).status).toBe(503)
    expect(checks).toBe(2)
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
})
