import { join } from 'node:path'
import type { Pool } from 'pg'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { identityKey, toolKey, windowKey } from '../../src/budget/keys'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import type { BucketCharge, BucketReading } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { MCP_HEADERS, as, configFrom, tempDir, toolCall } from '../helpers/harness'
import { closeTestDatabase, openTestDatabase, type TestDatabase } from '../helpers/postgres'

const TOKEN = 'admin-token-for-postgres-tests-0123456789abcdef'

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

/** Whole seconds: a check's window opens at the window clock plus the time the check spent on the database. */
function rounded(readings: BucketReading[]): BucketReading[] {
  return readings.map((r) => ({ ...r, resetSeconds: r.resetSeconds === null ? null : Math.round(r.resetSeconds) }))
}

function charge(key: string, limit: number, windowSeconds = 60): BucketCharge {
  return { key, kind: 'identity', name: key, limit, windowSeconds, cost: 1, charged: true }
}

describe('BudgetStore.inspect and reset', () => {
  const a = windowKey(identityKey('acme', 'alice'), 60)
  const b = windowKey(toolKey('search'), 60)
  const repeat = `${JSON.stringify(['repeat', 'acme', 'alice']).slice(0, -1)},"f00d",60]`

  test('Postgres: counts on the window clock, a window that ended reads as 0, reset deletes only what was named', async () => {
    let now = new Date('2030-01-01T00:00:00Z')
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, clock: () => now })
    try {
      await store.admit([charge(a, 5), charge(b, 5), charge(repeat, 5)])
      await store.admit([charge(a, 5)])
      now = new Date('2030-01-01T00:00:20Z')
      expect(rounded(await store.inspect({ keys: [a, b, 'absent'], prefixes: [repeat.slice(0, repeat.indexOf('"f00d"'))] }))).toEqual([
        { key: a, used: 2, resetSeconds: 40 },
        { key: b, used: 1, resetSeconds: 40 },
        { key: 'absent', used: 0, resetSeconds: null },
        { key: repeat, used: 1, resetSeconds: 40 },
      ])
      expect(rounded(await store.reset({ keys: [a, 'absent'] }))).toEqual([{ key: a, used: 2, resetSeconds: 40 }])
      expect((await store.inspect({ keys: [a, b] })).map((r) => r.used)).toEqual([0, 1])
      // After the window: the row is still there (the reaper has not run) but reads as 0 used.
      now = new Date('2030-01-01T00:01:01Z')
      expect(await store.inspect({ keys: [b] })).toEqual([{ key: b, used: 0, resetSeconds: null }])
      expect(await store.reset({ keys: [b] })).toEqual([{ key: b, used: 0, resetSeconds: null }])
      expect((await pool.query('SELECT 1 FROM budget_buckets WHERE key = $1', [b])).rowCount).toBe(0)
    } finally {
      await store.close()
    }
  })

  test('memory: the same contract on this process', async () => {
    let now = 1_000_000
    const store = new MemoryBudgetStore({ now: () => now })
    store.admitNow([charge(a, 5), charge(repeat, 5)])
    store.admitNow([charge(a, 5)])
    now += 20_000
    const prefix = repeat.slice(0, repeat.indexOf('"f00d"'))
    expect(await store.inspect({ keys: [a, 'absent'], prefixes: [prefix] })).toEqual([
      { key: a, used: 2, resetSeconds: 40 },
      { key: 'absent', used: 0, resetSeconds: null },
      { key: repeat, used: 1, resetSeconds: 40 },
    ])
    expect(await store.reset({ keys: [], prefixes: [prefix] })).toEqual([{ key: repeat, used: 1, resetSeconds: 40 }])
    expect(store.admitNow([charge(a, 2)]).admitted).toBe(false) // alice's own bucket was not reset
    expect(await store.reset({ keys: [a] })).toEqual([{ key: a, used: 2, resetSeconds: 40 }])
    expect(store.admitNow([charge(a, 2)]).admitted).toBe(true)
    now += 60_000
    expect(await store.inspect({ keys: [a] })).toEqual([{ key: a, used: 0, resetSeconds: null }])
  })
})

describe('two replicas sharing Postgres', () => {
  let replicas: RunningGateway[]

  beforeAll(async () => {
    replicas = []
    for (const name of ['a', 'b']) {
      const dir = tempDir()
      const config = configFrom(
        {
          listen: '127.0.0.1:0',
          upstream: upstream.url,
          auth: { mode: 'header' },
          audit: { output: join(dir, `${name}.jsonl`), spill_file: join(dir, `${name}-spill.jsonl`) },
          features: { budget_enforcement: true, postgres_storage: true },
          postgres: { dsn: db.url, max_connections: 4 },
          budget: { requests_per_window: 2, window_seconds: 300, repeat_limit: { calls: 50, window_seconds: 300 } },
          admin: { listen: '127.0.0.1:0', token: TOKEN },
        },
        {},
        dir,
      )
      replicas.push(await startGateway(config, { log: silentLogger() }))
    }
  })
  afterAll(() => Promise.all(replicas.map((r) => r.shutdown())))

  const call = (r: RunningGateway, identity: string): Promise<number> =>
    fetch(`${r.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as(identity) },
      body: JSON.stringify(toolCall('echo', { text: 'hi' })),
    }).then(async (res) => (await res.text(), res.status))

  const admin = async (r: RunningGateway, method: string, path: string): Promise<{ status: number; body: Record<string, unknown> }> => {
    const res = await fetch(`${r.adminUrl}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}` } })
    return { status: res.status, body: (await res.json()) as Record<string, unknown> }
  }

  type Bucket = { kind: string; name: string; used: number; remaining: number }

  test('calls on one replica show on the other; a reset on the other admits the next call on the first', async () => {
    const [a, b] = replicas
    expect(await call(a, 'gina')).toBe(200)
    expect(await call(a, 'gina')).toBe(200)
    expect(await call(a, 'gina')).toBe(429)
    const seen = await admin(b, 'GET', '/budgets?identity=gina&tenant=acme')
    expect(seen.body.scope).toBe('all replicas')
    const buckets = seen.body.buckets as Bucket[]
    expect(buckets.filter((x) => x.kind === 'identity').map((x) => [x.used, x.remaining])).toEqual([[2, 0]])
    // Both calls had the same arguments: one repeat bucket, listed by its prefix.
    expect(buckets.filter((x) => x.kind === 'repeat').map((x) => [x.name, x.used])).toEqual([['gina', 2]])

    const reset = await admin(b, 'DELETE', '/budgets?identity=gina&tenant=acme&kind=identity')
    expect(reset.status).toBe(200)
    expect((reset.body.reset as Bucket[]).map((x) => [x.kind, x.used])).toEqual([['identity', 2]])
    expect(await call(a, 'gina')).toBe(200)
    const after = await admin(a, 'GET', '/budgets?identity=gina&tenant=acme&kind=identity')
    expect((after.body.buckets as Bucket[])[0].used).toBe(1)
  })

  test('admin calls land in audit_entries, one row each', async () => {
    const [a] = replicas
    await admin(a, 'GET', '/budgets?identity=ivan&tenant=acme')
    const res = await fetch(`${a.adminUrl}/budgets`, { headers: { authorization: 'Bearer nope' } })
    expect(res.status).toBe(401)
    await a.audit.flush()
    const rows = await pool.query<{ method: string; decision: string; status: number; tool: string }>(
      "SELECT method, decision, status, tool FROM audit_entries WHERE method LIKE 'admin/%' AND (tool = 'identity=ivan tenant=acme' OR decision = 'unauthorized') ORDER BY id",
    )
    expect(rows.rows).toEqual([
      { method: 'admin/budgets.get', decision: 'allow', status: 200, tool: 'identity=ivan tenant=acme' },
      { method: 'admin/budgets.get', decision: 'unauthorized', status: 401, tool: '' },
    ])
  })
})
