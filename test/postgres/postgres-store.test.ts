import type { Pool } from 'pg'
import { identityKey, tenantKey, toolKey } from '../../src/budget/keys'
import { PostgresBudgetStore, REFUND_SQL } from '../../src/budget/postgres-store'
import type { BucketCharge } from '../../src/budget/store'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { budgetStoreContract, bucket } from '../budget/store-contract'
import { closeTestDatabase, openTestDatabase, type TestDatabase, testPool } from '../helpers/postgres'
import { busySessions, countOf, lockWaits } from '../helpers/budget-rows'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { waitFor } from '../helpers/wait'

let db: TestDatabase
let pool: Pool

beforeAll(async () => {
  ;({ db, pool } = await openTestDatabase(20))
  await migrate(pool, silentLogger())
})

afterAll(() => closeTestDatabase({ db, pool }))

test('the migrations leave the version 1, 2 and 3 admit functions side by side (rolling upgrades)', async () => {
  const r = await pool.query<{ args: string }>(
    "SELECT pg_get_function_identity_arguments(oid) AS args FROM pg_proc WHERE proname = 'wardline_budget_admit' ORDER BY pronargs, oid",
  )
  const common = 'p_keys text[], p_limits integer[], p_windows double precision[], p_costs integer[]'
  const tail = 'p_budget_ms integer, p_deadline_ms double precision, p_synchronous_commit boolean'
  expect(r.rows.map((row) => row.args)).toEqual([
    `${common}, ${tail}, p_clock_offset_seconds double precision`, // version 1
    `${common}, ${tail}, p_now timestamp with time zone`, // version 2
    `${common}, p_charged boolean[], ${tail}, p_now timestamp with time zone`, // version 3
  ])
})

/**
 * A check (of a store with checkTimeoutMs 1000) whose verdict commits in time but reaches the store
 * after it gave up: `lockedKey`'s row is held until the check waits on it, then released, while this
 * event loop stays busy past the check's deadline, so the deadline timer fires before the verdict is read.
 */
async function admitTooLate(store: PostgresBudgetStore, charges: BucketCharge[], lockedKey: string): Promise<void> {
  const holder = await pool.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT * FROM budget_buckets WHERE key = $1 FOR UPDATE', [lockedKey])
    const started = performance.now()
    const late = store.admit(charges)
    await waitFor(async () => (await lockWaits(pool)) > 0, {
      what: 'the check to wait on the row lock',
      intervalMs: 5,
    })
    const committed = holder.query('COMMIT')
    while (performance.now() - started < 1100);
    await expect(late).rejects.toThrow(/no budget verdict/)
    await committed
  } finally {
    holder.release()
  }
}

budgetStoreContract('PostgresBudgetStore', async () => {
  await pool.query('TRUNCATE budget_buckets')
  // The window clock is injected: it starts at the real time and moves only when the test says so.
  let nowMs = Date.now()
  const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000, clock: () => new Date(nowMs) })
  const advance = (seconds: number): Promise<void> => {
    nowMs += seconds * 1000
    return Promise.resolve()
  }
  return { store, advance }
})

describe('PostgresBudgetStore', () => {
  beforeEach(async () => {
    await pool.query('TRUNCATE budget_buckets')
  })

  test('a check with tool, tenant and identity buckets is one round trip to the database', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 1)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 5000 })
      const charges = [bucket(toolKey('search'), 100), bucket(tenantKey('acme'), 100), bucket(identityKey('acme', 'alice'), 100)]
      await store.admit(charges) // opens the connection and prepares the statement
      const before = proxy.roundTrips
      for (let i = 0; i < 10; i++) expect((await store.admit(charges)).admitted).toBe(true)
      expect(proxy.roundTrips - before).toBe(10)
      expect(await countOf(pool, identityKey('acme', 'alice'))).toBe(11)
    } finally {
      await viaProxy.end()
      await proxy.close()
    }
  })

  test('a check that charges some of its buckets and only checks the others is still one round trip', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 1)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 5000 })
      const charges = [
        bucket(toolKey('search'), 100, { charged: false }),
        bucket(tenantKey('acme'), 100, { charged: false }),
        bucket(identityKey('acme', 'alice'), 100),
      ]
      await store.admit(charges) // opens the connection and prepares the statement
      const before = proxy.roundTrips
      for (let i = 0; i < 10; i++) expect((await store.admit(charges)).admitted).toBe(true)
      expect(proxy.roundTrips - before).toBe(10)
      expect(await countOf(pool, identityKey('acme', 'alice'))).toBe(11)
      // Checked only: locked through a placeholder row, which the check leaves at 0 and already expired.
      expect(await countOf(pool, toolKey('search'))).toBe(0)
      expect(await countOf(pool, tenantKey('acme'))).toBe(0)
    } finally {
      await viaProxy.end()
      await proxy.close()
    }
  })

  test('checks that share buckets in opposite orders never deadlock and stay exact', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 10_000 })
    const a = bucket(toolKey('a'), 150)
    const b = bucket(tenantKey('b'), 150)
    const c = bucket(identityKey('acme', 'c'), 150)
    const orders: BucketCharge[][] = [
      [a, b, c],
      [c, b, a],
      [b, c, a],
      [a, c, b],
    ]
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => store.admit(orders[i % orders.length])))
    expect(results.filter((r) => r.admitted)).toHaveLength(150)
    expect(await countOf(pool, a.key)).toBe(150)
    expect(await countOf(pool, b.key)).toBe(150)
    expect(await countOf(pool, c.key)).toBe(150)
  })

  test('refunds running beside checks on the same buckets never deadlock and leave exact counts', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 10_000 })
    // Tier order (tool → tenant → identity) is the reverse of key order for these keys, as in production.
    const charges = [
      bucket(toolKey('search'), 1_000_000),
      bucket(tenantKey('acme'), 1_000_000),
      bucket(identityKey('acme', 'alice'), 1_000_000),
    ]
    expect(charges.map((c) => c.key)).not.toEqual(charges.map((c) => c.key).sort())
    await store.admit(charges)
    const ends = (await pool.query<{ key: string; ends: string }>('SELECT key, ends_at::text AS ends FROM budget_buckets')).rows
    const endsOf = charges.map((c) => ends.find((r) => r.key === c.key)?.ends)
    let admits = 1
    let refunds = 0
    const errors: string[] = []
    const stopAt = performance.now() + 3000
    const workers = Array.from({ length: 12 }, async (_, w) => {
      while (performance.now() < stopAt) {
        try {
          if (w % 3 === 0) {
            // Refund what this worker itself admitted, so a count never needs the greatest(0, …) floor.
            await store.admit(charges)
            admits++
            await pool.query(REFUND_SQL, [charges.map((c) => c.key), charges.map((c) => c.cost), endsOf])
            refunds++
          } else {
            if ((await store.admit(charges)).admitted) admits++
          }
        } catch (err) {
          errors.push((err as Error).message)
        }
      }
    })
    await Promise.all(workers)
    expect(errors).toEqual([])
    expect(refunds).toBeGreaterThan(50)
    for (const c of charges) expect(await countOf(pool, c.key)).toBe(admits - refunds)
  }, 20_000)

  test('an admitted verdict that reaches the gateway after it stopped waiting is refunded, and reported once', async () => {
    let refunds = 0
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 1000, onRefunded: () => refunds++ })
    const alice = bucket(identityKey('acme', 'alice'), 10)
    await store.admit([alice])
    await admitTooLate(store, [alice], alice.key)
    await store.close() // waits for refunds in flight
    expect(refunds).toBe(1)
    expect(await countOf(pool, alice.key)).toBe(1)
  })

  test('a late admitted verdict is refunded in its charged buckets only, never in those it only checked', async () => {
    let refunds = 0
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 1000, onRefunded: () => refunds++ })
    const tenant = bucket(tenantKey('acme'), 10, { charged: false })
    const alice = bucket(identityKey('acme', 'alice'), 10)
    await store.admit([{ ...tenant, charged: true, cost: 2 }]) // other callers' served calls
    await store.admit([alice])
    await admitTooLate(store, [tenant, alice], alice.key)
    await store.close()
    expect(refunds).toBe(1)
    expect(await countOf(pool, alice.key)).toBe(1)
    expect(await countOf(pool, tenant.key)).toBe(2)
  })

  test('a refund against a hung network rejects within its bound, and close() still returns', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 2)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 5000 })
      const charges = [bucket(tenantKey('acme'), 10, { charged: false }), bucket(identityKey('acme', 'alice'), 10)]
      const result = await store.admit(charges)
      proxy.pause()
      const started = performance.now()
      await expect(store.refund(charges, result, 300)).rejects.toThrow(/timeout|no database connection|no budget refund/i)
      // Left waiting, the refund would last as long as the network hangs: 10× its 300 ms bound is generous.
      expect(performance.now() - started).toBeLessThan(3000)
      const closing = performance.now()
      await store.close()
      expect(performance.now() - closing).toBeLessThan(1000)
    } finally {
      proxy.resume()
      await viaProxy.end()
      await proxy.close()
    }
  })

  test('a refund against a database that went away rejects within its bound, and close() still returns', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 2)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 1000 })
      const charges = [bucket(identityKey('acme', 'alice'), 10)]
      const result = await store.admit(charges)
      proxy.refuse()
      const started = performance.now()
      await expect(store.refund(charges, result)).rejects.toThrow()
      // The default bound is check_timeout_seconds (1 s here); 5× leaves a loaded machine room.
      expect(performance.now() - started).toBeLessThan(5000)
      await store.close()
      proxy.allow()
      expect(await countOf(pool, charges[0].key)).toBe(1) // nothing was taken back
    } finally {
      await viaProxy.end()
      await proxy.close()
    }
  })

  test('the version 3 function refuses a NULL or missing charged flag rather than guessing one', async () => {
    const call = (charged: string): Promise<unknown> =>
      pool.query(`SELECT * FROM wardline_budget_admit(ARRAY['a', 'b'], ARRAY[5, 5], ARRAY[60::float8, 60::float8], ARRAY[1, 1],
        ${charged}, 1000, NULL, false, clock_timestamp())`)
    await expect(call('ARRAY[true, NULL]::boolean[]')).rejects.toThrow(/p_charged/)
    await expect(call('ARRAY[true]::boolean[]')).rejects.toThrow(/p_charged/)
    await expect(call('NULL::boolean[]')).rejects.toThrow(/p_charged/)
    expect(await countOf(pool, 'a')).toBeNull()
    await call('ARRAY[false, true]::boolean[]')
    expect([await countOf(pool, 'a'), await countOf(pool, 'b')]).toEqual([0, 1])
  })

  test('a lock timeout, an error the server sent, keeps the connection: contention does not turn into reconnects', async () => {
    const single = testPool(db.url, 1)
    try {
      const store = new PostgresBudgetStore(single, { checkTimeoutMs: 300 })
      const bob = bucket(identityKey('acme', 'bob'), 10)
      await store.admit([bob])
      const pid = async (): Promise<number> => (await single.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid
      const before = await pid()
      const holder = await pool.connect()
      try {
        await holder.query('BEGIN')
        await holder.query('SELECT * FROM budget_buckets WHERE key = $1 FOR UPDATE', [bob.key])
        await expect(store.admit([bob])).rejects.toThrow(/lock timeout|deadline/i)
        await holder.query('COMMIT')
      } finally {
        holder.release()
      }
      expect(await pid()).toBe(before)
      expect((await store.admit([bob])).admitted).toBe(true)
    } finally {
      await single.end()
    }
  })

  test('windows follow the database clock: rows carry the server time, not the replica time', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 5000 })
    await store.admit([bucket(identityKey('acme', 'alice'), 5, { windowSeconds: 30 })])
    const r = await pool.query<{ ahead: number }>(`SELECT extract(epoch FROM ends_at - now())::float8 AS ahead FROM budget_buckets`)
    expect(r.rows[0].ahead).toBeGreaterThan(28)
    expect(r.rows[0].ahead).toBeLessThanOrEqual(30)
  })

  test('a row lock held past the check timeout fails the check in time, and nothing is charged once it is released', async () => {
    const store = new PostgresBudgetStore(pool, { checkTimeoutMs: 300 })
    const alice = bucket(identityKey('acme', 'alice'), 10)
    await store.admit([alice])
    const holder = await pool.connect()
    try {
      await holder.query('BEGIN')
      await holder.query('SELECT * FROM budget_buckets WHERE key = $1 FOR UPDATE', [alice.key])
      const started = performance.now()
      await expect(store.admit([alice])).rejects.toThrow(/lock timeout|deadline|timeout/i)
      // Left waiting, the check would last as long as the lock (released only below): 10× its 300 ms bound is generous.
      expect(performance.now() - started).toBeLessThan(3000)
      // Hold the lock well past the check's bound, as a stuck transaction would: the scenario, not a wait for
      // something to happen. A check still waiting in the database at COMMIT would charge (the ghost).
      await new Promise((resolve) => setTimeout(resolve, 400))
      await holder.query('COMMIT')
    } finally {
      holder.release()
    }
    // A ghost would have been queued behind the lock: once nothing runs in the database it has landed,
    // and the abandoned check must not have charged.
    await waitFor(async () => (await busySessions(pool)) === 0, { what: 'every statement queued behind the lock to end', intervalMs: 20 })
    expect(await countOf(pool, alice.key)).toBe(1)
    expect((await store.admit([alice])).buckets[0].remaining).toBe(8)
  })

  test('a hung network fails the check at its deadline and the late statement never charges', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 2)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 250 })
      const alice = bucket(identityKey('acme', 'alice'), 10)
      await store.admit([alice])
      proxy.pause()
      const started = performance.now()
      await expect(store.admit([alice])).rejects.toThrow(/no budget verdict|timeout/i)
      // Left waiting, the check would last as long as the network hangs (until below): 10× its 250 ms bound is generous.
      expect(performance.now() - started).toBeLessThan(2500)
      // The statement reaches the server only now, after its deadline: it must roll back.
      proxy.resume()
      // A negative check: nothing observable marks "the late statement has run", so it gets a moment to
      // charge (a round trip takes a millisecond here) before the count is read.
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect(await countOf(pool, alice.key)).toBe(1)
    } finally {
      await viaProxy.end()
      await proxy.close()
    }
  })

  test('an unreachable database rejects the check instead of hanging', async () => {
    const proxy = await PostgresProxy.start(db.url)
    const viaProxy = testPool(proxy.urlFor(db.url), 2)
    try {
      const store = new PostgresBudgetStore(viaProxy, { checkTimeoutMs: 1000 })
      proxy.refuse()
      const started = performance.now()
      await expect(store.admit([bucket(identityKey('acme', 'alice'), 10)])).rejects.toThrow()
      // Hanging would mean forever; 5× the 1 s check bound leaves a loaded machine room.
      expect(performance.now() - started).toBeLessThan(5000)
    } finally {
      await viaProxy.end()
      await proxy.close()
    }
  })
})
