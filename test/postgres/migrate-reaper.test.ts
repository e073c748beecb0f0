import type { Pool } from 'pg'
import { identityKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { MIGRATIONS } from '../../src/postgres/migrations'
import { BudgetReaper } from '../../src/postgres/reaper'
import { bucket } from '../budget/store-contract'
import { freshDatabase, type TestDatabase, testPool } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'

let db: TestDatabase
let pools: Pool[]

beforeAll(async () => {
  db = await freshDatabase()
  pools = Array.from({ length: 5 }, () => testPool(db.url, 3))
})

afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()))
  await db.drop()
})

/** An injected reaper clock a minute past the real one: every window of under a minute has ended. */
const aMinuteAhead = (): Date => new Date(Date.now() + 60_000)

test('five replicas migrating at once apply each migration exactly once and all end at the newest version', async () => {
  const results = await Promise.all(pools.map((p) => migrate(p, silentLogger())))
  const newest = Math.max(...MIGRATIONS.map((m) => m.version))
  expect(results.map((r) => r.version)).toEqual(pools.map(() => newest))
  expect(results.flatMap((r) => r.applied).sort()).toEqual(MIGRATIONS.map((m) => m.version).sort())
  const rows = await pools[0].query<{ version: number }>('SELECT version FROM wardline_schema_migrations ORDER BY version')
  expect(rows.rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version))
  expect((await migrate(pools[0], silentLogger())).applied).toEqual([])
})

test('a database migrated by a newer Wardline is refused instead of used', async () => {
  await pools[0].query("INSERT INTO wardline_schema_migrations (version, name) VALUES (999, 'from the future')")
  try {
    await expect(migrate(pools[1], silentLogger())).rejects.toMatchObject({
      code: 'WL_POSTGRES_UNAVAILABLE',
      message: expect.stringMatching(/newer than this Wardline knows/) as unknown,
    })
  } finally {
    await pools[0].query('DELETE FROM wardline_schema_migrations WHERE version = 999')
  }
})

test('a failing migration leaves the schema at the last complete version', async () => {
  const broken = [...MIGRATIONS, { version: 1000, name: 'broken', sql: 'CREATE TABLE half_done (x int); SELECT no_such_function()' }]
  await expect(migrate(pools[0], silentLogger(), broken)).rejects.toThrow(/migration 1000 \(broken\) failed/)
  const table = await pools[0].query<{ t: string | null }>("SELECT to_regclass('half_done') AS t")
  expect(table.rows[0].t).toBeNull()
  const versions = await pools[0].query<{ v: number }>('SELECT max(version)::int AS v FROM wardline_schema_migrations')
  expect(versions.rows[0].v).toBe(Math.max(...MIGRATIONS.map((m) => m.version)))
})

test("a migration outlasting the pool's request-path query bound still completes", async () => {
  // openPool gives every query a 30 s client-side bound; a pool with a 300 ms one shows the same cut.
  const hasty = testPool(db.url, 1, { query_timeout: 300, statement_timeout: 300 })
  try {
    const slow = [...MIGRATIONS, { version: 1001, name: 'slow', sql: 'SELECT pg_sleep(0.8); CREATE TABLE slow_done (x int)' }]
    expect((await migrate(hasty, silentLogger(), slow)).applied).toEqual([1001])
    expect((await hasty.query<{ made: boolean }>("SELECT to_regclass('slow_done') IS NOT NULL AS made")).rows[0].made).toBe(true)
  } finally {
    await pools[0].query('DROP TABLE IF EXISTS slow_done; DELETE FROM wardline_schema_migrations WHERE version = 1001')
    await hasty.end()
  }
})

describe('budget reaper', () => {
  beforeEach(async () => {
    await pools[0].query('TRUNCATE budget_buckets')
  })

  test('deletes only expired buckets, in bounded batches, and the survivors keep their counts', async () => {
    const store = new PostgresBudgetStore(pools[0], { checkTimeoutMs: 5000 })
    for (let i = 0; i < 25; i++) await store.admit([bucket(identityKey('acme', `short-${i}`), 5, { windowSeconds: 10 })])
    await store.admit([bucket(identityKey('acme', 'long'), 5, { windowSeconds: 600 })])
    await store.admit([bucket(identityKey('acme', 'long'), 5, { windowSeconds: 600 })])
    const reaper = new BudgetReaper(pools[1], silentLogger(), { batchSize: 10, maxBatches: 2, clock: aMinuteAhead })
    expect(await reaper.runOnce()).toEqual({ ran: true, deleted: 20, backlog: true }) // two batches of ten, then it stops for this run
    expect(await reaper.runOnce()).toEqual({ ran: true, deleted: 5, backlog: false })
    const left = await pools[0].query('SELECT key, count FROM budget_buckets')
    expect(left.rows).toEqual([{ key: identityKey('acme', 'long'), count: 2 }])
    await reaper.close()
  })

  test('a backlog larger than one run is worked off in quick follow-up runs, not one run per interval', async () => {
    const values = Array.from({ length: 100 }, (_, i) => `('old-${i}', 1, now() - interval '1 hour')`).join(', ')
    await pools[0].query(`INSERT INTO budget_buckets (key, count, ends_at) VALUES ${values}`)
    // 20 rows a run: after the first run (one interval in), one run per interval would leave the other
    // 80 rows for four more intervals; back-to-back follow-ups (10 ms apart) clear them within the first.
    const intervalMs = 1000
    const reaper = new BudgetReaper(pools[1], silentLogger(), { batchSize: 10, maxBatches: 2, intervalMs, backlogDelayMs: 10 })
    reaper.start()
    try {
      const remaining = async (): Promise<number> =>
        (await pools[0].query<{ n: number }>('SELECT count(*)::int AS n FROM budget_buckets')).rows[0].n
      await waitFor(async () => (await remaining()) < 100, { what: 'the first reaper run', intervalMs: 20 })
      const firstRunSeenAt = performance.now()
      await waitFor(async () => (await remaining()) === 0, { what: 'the backlog to be worked off', intervalMs: 20 })
      // Expected in tens of ms; a second interval would be needed for even one run more at the regular pace.
      expect(performance.now() - firstRunSeenAt).toBeLessThan(intervalMs)
    } finally {
      await reaper.close()
    }
  })

  test('runs on one replica at a time: a second reaper skips its turn while the first holds the lock', async () => {
    const holder = await pools[2].connect()
    try {
      await holder.query('SELECT pg_advisory_lock($1)', [0x776c7270])
      const reaper = new BudgetReaper(pools[3], silentLogger())
      expect(await reaper.runOnce()).toEqual({ ran: false, deleted: 0, backlog: false })
      await holder.query('SELECT pg_advisory_unlock($1)', [0x776c7270])
      expect((await reaper.runOnce()).ran).toBe(true)
    } finally {
      holder.release()
    }
  })

  test('skips a bucket a budget check is holding instead of waiting for it', async () => {
    const store = new PostgresBudgetStore(pools[0], { checkTimeoutMs: 5000 })
    await store.admit([bucket(identityKey('acme', 'held'), 5, { windowSeconds: 1 })])
    const holder = await pools[2].connect()
    try {
      await holder.query('BEGIN')
      await holder.query('SELECT 1 FROM budget_buckets FOR UPDATE')
      const reaper = new BudgetReaper(pools[3], silentLogger(), { clock: aMinuteAhead })
      // The row stays locked until after this returns: a reaper that waited for it would never return.
      expect(await reaper.runOnce()).toEqual({ ran: true, deleted: 0, backlog: false })
      await holder.query('COMMIT')
      expect(await reaper.runOnce()).toEqual({ ran: true, deleted: 1, backlog: false })
    } finally {
      holder.release()
    }
  })
})
