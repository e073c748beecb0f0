// Red team: the admin API and the revocation list on Postgres, with one replica
// cut off from the database, and resets racing admissions.
import { join } from 'node:path'
import type { Pool } from 'pg'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { identityKey, windowKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BucketCharge } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { MCP_HEADERS, as, configFrom, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

const TOKEN = 'redteam-admin-postgres-token-0123456789abcdef'

let db: TestDatabase
let pool: Pool
let upstream: ExampleServer

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(4))
  await migrate(pool, silentLogger())
  upstream = await startExampleServer({ mode: 'stateless-json' })
})
afterAll(async () => {
  await upstream.close()
  await closeTestDatabase({ db, pool })
})

function charge(key: string, limit: number): BucketCharge {
  return { key, kind: 'identity', name: key, limit, windowSeconds: 60, cost: 1, charged: true }
}

describe('reset racing admissions (PostgresBudgetStore, real clock)', () => {
  test('a refund of a check charged before a reset takes nothing from the window opened after it', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
    const key = windowKey(identityKey('acme', 'racer'), 60)
    try {
      const before = await store.admit([charge(key, 10)])
      expect(before.admitted).toBe(true)
      expect((await store.reset({ keys: [key] })).map((r) => r.used)).toEqual([1])
      expect((await store.admit([charge(key, 10)])).admitted).toBe(true)
      await store.refund([charge(key, 10)], before)
      expect((await store.inspect({ keys: [key] })).map((r) => r.used)).toEqual([1])
    } finally {
      await store.close()
    }
  })

  test('20 admissions and 5 resets at once: no deadlock, no count below 0 nor above what was admitted', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
    const key = windowKey(identityKey('acme', 'crowd'), 60)
    try {
      const work: Array<Promise<unknown>> = []
      for (let i = 0; i < 20; i++) work.push(store.admit([charge(key, 1000)]))
      for (let i = 0; i < 5; i++) work.push(store.reset({ keys: [key] }))
      await Promise.all(work)
      const [{ rows }] = [await pool.query<{ count: number }>('SELECT count FROM budget_buckets WHERE key = $1', [key])]
      const used = (await store.inspect({ keys: [key] }))[0].used
      expect(used).toBeGreaterThanOrEqual(0)
      expect(used).toBeLessThanOrEqual(20)
      expect(rows.every((r) => r.count >= 0)).toBe(true)
    } finally {
      await store.close()
    }
  })
})

describe('one replica cut off from the database', () => {
  let proxy: PostgresProxy
  const replicas: RunningGateway[] = []
  const audits: string[] = []

  beforeAll(async () => {
    proxy = await PostgresProxy.start(db.url)
    for (const name of ['a', 'b']) {
      const dir = tempDir('wardline-rt-admin-pg-')
      audits.push(join(dir, 'audit.jsonl'))
      const config = configFrom(
        {
          listen: '127.0.0.1:0',
          upstream: upstream.url,
          auth: { mode: 'header' },
          audit: { output: join(dir, 'audit.jsonl') },
          features: { budget_enforcement: true, postgres_storage: true },
          postgres: { dsn: name === 'a' ? proxy.urlFor(db.url) : db.url, max_connections: 4 },
          budget: { requests_per_window: 100, window_seconds: 60 },
          admin: { listen: '127.0.0.1:0', token: TOKEN },
        },
        {},
        dir,
      )
      replicas.push(await startGateway(config, { log: silentLogger() }))
    }
  })
  afterAll(async () => {
    proxy.allow()
    await Promise.all(replicas.map((r) => r.shutdown()))
    await proxy.close()
  })

  const call = (r: RunningGateway, identity: string): Promise<number> =>
    fetch(`${r.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as(identity) },
      body: JSON.stringify(toolCall('echo', { text: 'hi' })),
    }).then(async (res) => (await res.text(), res.status))

  const admin = async (r: RunningGateway, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${r.adminUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return { status: res.status, body: (await res.json()) as Record<string, unknown> }
  }

  test('an odd identity in an odd tenant until the year 9999, made on B, is refused on A with the same entry', async () => {
    const [a, b] = replicas
    const identity = 'q"u\\o\'te;--'
    const tenant = 'ac"me'
    const send = (r: RunningGateway): Promise<number> =>
      fetch(`${r.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, 'x-wardline-identity': identity, 'x-wardline-tenant': tenant },
        body: JSON.stringify(toolCall('echo', { text: 'hi' })),
      }).then(async (res) => (await res.text(), res.status))
    expect(await send(a)).toBe(200)
    const made = await admin(b, 'POST', '/revocations', {
      identity,
      tenant,
      until: '9999-12-31T23:59:59.999Z',
      reason: "'); DROP TABLE x; --",
    })
    expect(made.status).toBe(201)
    await waitFor(async () => (await send(a)) === 401, { what: 'A to refuse the odd identity', intervalMs: 50 })
    expect((await admin(a, 'GET', '/revocations')).body.revocations).toEqual([made.body.revocation])
    expect(await call(a, 'q')).toBe(200)
    expect(
      (await admin(a, 'DELETE', `/revocations?identity=${encodeURIComponent(identity)}&tenant=${encodeURIComponent(tenant)}`)).status,
    ).toBe(200)
    await waitFor(async () => (await send(b)) === 200, { what: 'B to admit it again', intervalMs: 50 })
  })

  test('a revocation made on the cut-off replica fails with 503 and its cause, is audited, and applies nowhere', async () => {
    const [a, b] = replicas
    proxy.refuse()
    const r = await admin(a, 'POST', '/revocations', { identity: 'oscar', tenant: 'acme', reason: 'leak' })
    expect(r.status).toBe(503)
    expect(r.body.error).toMatch(/^admin\.revocations\.create failed: /)
    // Not applied on A half-way (the write failed before the local view was touched), nor on B.
    expect(await call(b, 'oscar')).toBe(200)
    expect((await admin(b, 'GET', '/revocations')).body.revocations).toEqual([])
    await a.audit.flush()
    const entries = readJsonl(audits[0]).filter((e) => e.method === 'admin/revocations.create' && e.status === 503)
    expect(entries).toEqual([
      expect.objectContaining({ decision: 'error', status: 503, tool: 'identity=oscar tenant=acme', identity: 'admin' }),
    ])
    // A reset on the cut-off replica: 503 too, and B's counts are untouched.
    expect(await call(b, 'oscar')).toBe(200)
    const reset = await admin(a, 'DELETE', '/budgets?identity=oscar&tenant=acme&kind=identity')
    expect(reset.status).toBe(503)
    expect(
      ((await admin(b, 'GET', '/budgets?identity=oscar&tenant=acme&kind=identity')).body.buckets as Array<{ used: number }>)[0].used,
    ).toBe(2)

    await a.audit.flush()
    // A failed action's entry names its target too: an empty tool would not say whom it was for.
    expect(readJsonl(audits[0]).filter((e) => e.method === 'admin/budgets.reset' && e.status === 503)).toEqual([
      expect.objectContaining({ decision: 'error', status: 503, tool: 'identity=oscar tenant=acme kind=identity' }),
    ])
    expect((await admin(a, 'DELETE', '/revocations?identity=oscar&tenant=acme')).status).toBe(503)
    await a.audit.flush()
    expect(readJsonl(audits[0]).filter((e) => e.method === 'admin/revocations.remove' && e.status === 503)).toEqual([
      expect.objectContaining({ decision: 'error', status: 503, tool: 'identity=oscar tenant=acme' }),
    ])

    proxy.allow()
    // The operator retries once the database answers: the revocation reaches both replicas.
    await waitFor(async () => (await admin(a, 'POST', '/revocations', { identity: 'oscar', tenant: 'acme' })).status === 201, {
      what: 'the revocation to be accepted once the database answers',
      intervalMs: 200,
    })
    expect(await call(a, 'oscar')).toBe(401)
    await waitFor(async () => (await call(b, 'oscar')) === 401, { what: 'B to refuse oscar', intervalMs: 50 })
    expect((await admin(b, 'DELETE', '/revocations?identity=oscar&tenant=acme')).status).toBe(200)
    await waitFor(async () => (await call(a, 'oscar')) === 200, { what: 'A to admit oscar again', intervalMs: 50 })
  })
})
