import type { Pool } from 'pg'
import { identityKey } from '../../src/budget/keys'
import { PostgresBudgetStore } from '../../src/budget/postgres-store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { MIGRATIONS } from '../../src/postgres/migrations'
import { bucket } from '../budget/store-contract'
import { freshDatabase, type TestDatabase, testPool } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'

/** Migration 002: wardline_budget_admit takes the window clock (p_now) instead of a test-only offset. */
let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 5)
})

afterAll(async () => {
  await pool.end()
  await db.drop()
})

const LOCK_WAITS = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"

async function admitSignatures(): Promise<string[]> {
  const r = await pool.query<{ args: string }>(
    "SELECT pg_get_function_identity_arguments(oid) AS args FROM pg_proc WHERE proname = 'wardline_budget_admit'",
  )
  return r.rows.map((row) => row.args)
}

test("a database at version 1 upgrades to 2: the clock-taking function joins version 1's, and both count the same windows", async () => {
  expect((await migrate(pool, silentLogger(), MIGRATIONS.slice(0, 1))).version).toBe(1)
  // A bucket charged twice by version 1's function, as a running deployment would have left it.
  const v1 = `SELECT refused_by FROM wardline_budget_admit(ARRAY['["identity","acme","alice"]'], ARRAY[5], ARRAY[60::float8],
    ARRAY[1], 1000, NULL, false, 0::float8)`
  await pool.query(v1)
  await pool.query(v1)

  expect(await migrate(pool, silentLogger(), MIGRATIONS.slice(0, 2))).toEqual({ applied: [2], version: 2 })
  const signatures = await admitSignatures()
  expect(signatures).toHaveLength(2)
  expect(signatures.filter((s) => /p_now timestamp with time zone$/.test(s))).toHaveLength(1)
  // Version 3's function (003-charged-buckets.ts) keeps both beside it; this release's store calls
  // version 4's batch function (004-coalesced-admission.ts), on the same rows.
  const later = MIGRATIONS.slice(2).map((m) => m.version)
  expect(await migrate(pool, silentLogger())).toEqual({ applied: later, version: later[later.length - 1] })
  expect(await admitSignatures()).toHaveLength(3)

  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
  const result = await store.admit([bucket(identityKey('acme', 'alice'), 5)])
  expect(result.buckets[0].remaining).toBe(2)
  expect(result.buckets[0].resetSeconds).toBeLessThanOrEqual(60)
  // A replica of the previous release, mid rolling upgrade, still charges the same bucket.
  await pool.query(v1)
  expect((await store.admit([bucket(identityKey('acme', 'alice'), 5)])).buckets[0].remaining).toBe(0)
})

test('a NULL window clock is refused rather than read as "no window ever ends"', async () => {
  await expect(
    pool.query(
      `SELECT * FROM wardline_budget_admit(ARRAY['k'], ARRAY[5], ARRAY[60::float8], ARRAY[1], 1000, NULL, false, NULL::timestamptz)`,
    ),
  ).rejects.toThrow(/p_now must not be NULL/)
})

test('windows are judged when the row locks are held, not when the check arrived', async () => {
  await pool.query('TRUNCATE budget_buckets')
  // The injected clock stands still: only the time the check spends waiting for its lock moves it.
  const frozen = new Date()
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, clock: () => frozen })
  const alice = bucket(identityKey('acme', 'alice'), 1, { windowSeconds: 0.2 })
  expect((await store.admit([alice])).admitted).toBe(true)
  expect((await store.admit([alice])).admitted).toBe(false) // same instant, same window: full

  const holder = await pool.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT * FROM budget_buckets WHERE key = $1 FOR UPDATE', [alice.key])
    const waiting = store.admit([alice])
    await waitFor(async () => (await pool.query<{ n: number }>(LOCK_WAITS)).rows[0].n > 0, {
      what: 'the check to wait on the row lock',
      intervalMs: 5,
    })
    // The check now waits behind the lock; hold it past the window's end (a stuck transaction would).
    await holder.query('SELECT pg_sleep(0.3)')
    await holder.query('COMMIT')
    const result = await waiting
    expect(result.admitted).toBe(true) // the window ended while it waited: a new one opened
    expect(result.buckets[0].remaining).toBe(0)
  } finally {
    holder.release()
  }
})
