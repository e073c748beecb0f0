/**
 * The shared revocation list (features.postgres_storage): real Postgres, lists and gateways that share
 * one database as replicas do, a TCP proxy to take the database away. Times between a revocation and
 * the other replica refusing are measured and printed for the report; the one bound asserted is the
 * product's promise (1 s) plus a small tolerance, checked by polling the outcome.
 */
import { join } from 'node:path'
import { PostgresRevocationList } from '../../src/auth/revocations-postgres'
import { silentLogger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { SECRET, hour, hs } from '../auth/forge'
import { capturingLogger } from '../budget/budget-harness'
import { configFrom, echoStatus, metricSample, readJsonl, tempDir } from '../helpers/harness'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { testPool } from '../helpers/postgres'
import { revocationDatabase } from '../helpers/revocation-database'
import { waitFor } from '../helpers/wait'

/** The promise (docs/operations.md): a revocation reaches every replica within 1 s. */
const PROMISE_MS = 1000
/** Room for a loaded test machine (a refresh every 250 ms leaves 750 ms of the promise unused already). */
const TOLERANCE_MS = 250

const fx = revocationDatabase(4)

/** One replica's list on its own pool, started (first load done, refreshing every 250 ms). */
async function replicaList(options: { url?: string; cleanupIntervalMs?: number; start?: boolean } = {}): Promise<PostgresRevocationList> {
  const listPool = testPool(options.url ?? fx.db.url, 2)
  const list = new PostgresRevocationList(listPool, { log: silentLogger(), cleanupIntervalMs: options.cleanupIntervalMs })
  fx.cleanups.push(() => listPool.end())
  fx.cleanups.push(() => list.close())
  if (options.start !== false) await list.start()
  return list
}

interface Replica {
  readonly gateway: RunningGateway
  readonly url: string
  readonly auditFile: string
  readonly logs: ReturnType<typeof capturingLogger>['lines']
}

/** A whole gateway with Postgres storage (jwt auth, budgets off: only revocation is under test). */
async function startReplica(dsn = fx.db.url): Promise<Replica> {
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: fx.upstream.url,
      auth: { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } },
      audit: { output: auditFile, spill_file: join(dir, 'spill.jsonl') },
      features: { budget_enforcement: false, postgres_storage: true },
      postgres: { dsn, max_connections: 4 },
    },
    {},
    dir,
  )
  const { log, lines } = capturingLogger()
  const gateway = await startGateway(config, { log })
  fx.cleanups.push(() => gateway.shutdown())
  return { gateway, url: gateway.url, auditFile, logs: lines }
}

const tokens = new Map<string, string>()
/** One token per (identity, tenant) for the whole file: the second use of it is a token-cache hit. */
async function bearer(identity: string, tenant: string | null = 'acme'): Promise<Record<string, string>> {
  const key = `${identity}\n${tenant}`
  let token = tokens.get(key)
  if (token === undefined) {
    const claims = { sub: identity, iss: 'https://idp.example', aud: 'wardline', exp: hour(), ...(tenant === null ? {} : { tenant }) }
    tokens.set(key, (token = await hs(claims)))
  }
  return { authorization: `Bearer ${token}` }
}

function status(replica: Replica, headers: Record<string, string>): Promise<number> {
  return echoStatus(replica.url, headers)
}

async function readyz(replica: Replica): Promise<Record<string, unknown>> {
  return (await (await fetch(`${replica.url}/readyz`)).json()) as Record<string, unknown>
}

/** Polls `refused` every 2 ms from `since` (performance.now()) and returns the ms it took to hold. */
async function msUntil(condition: () => boolean | Promise<boolean>, since: number, what: string): Promise<number> {
  await waitFor(condition, { what, intervalMs: 2, timeoutMs: 5000 })
  return performance.now() - since
}

function summary(ms: readonly number[]): string {
  const sorted = [...ms].sort((a, b) => a - b)
  const at = (q: number): string => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))].toFixed(0)
  return `n=${sorted.length} min=${at(0)} p50=${at(0.5)} p90=${at(0.9)} max=${sorted[sorted.length - 1].toFixed(0)} ms`
}

/** A pause that moves the next revocation to another point of the other replica's 250 ms refresh cycle. */
const shift = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

describe('two lists on one database', () => {
  test('a revocation made on A applies on A at once and on B within 1 s (20 revocations measured), and so does a removal', async () => {
    const a = await replicaList()
    const b = await replicaList()
    const revoked: number[] = []
    const removed: number[] = []
    for (let i = 0; i < 20; i++) {
      await shift((i * 53) % 250)
      await a.revoke({ identity: `user-${i}`, tenant: 'acme', until: null })
      const t0 = performance.now()
      expect(a.isRevoked({ tenant: 'acme', identity: `user-${i}` }, Date.now())).toBe(true)
      revoked.push(await msUntil(() => b.isRevoked({ tenant: 'acme', identity: `user-${i}` }, Date.now()), t0, `B to refuse user-${i}`))
    }
    for (let i = 0; i < 10; i++) {
      await shift((i * 71) % 250)
      expect(await a.remove({ identity: `user-${i}`, tenant: 'acme' })).toBe(true)
      const t0 = performance.now()
      expect(a.isRevoked({ tenant: 'acme', identity: `user-${i}` }, Date.now())).toBe(false)
      removed.push(await msUntil(() => !b.isRevoked({ tenant: 'acme', identity: `user-${i}` }, Date.now()), t0, `B to let user-${i} back`))
    }
    console.log(`revocation made on A, applied on B: ${summary(revoked)}; removal: ${summary(removed)}`)
    expect(Math.max(...revoked, ...removed)).toBeLessThanOrEqual(PROMISE_MS + TOLERANCE_MS)
  })

  test('a write never gets undone on its own replica by a refresh that raced it (30 writes, each watched for 300 ms)', async () => {
    // A heavy list (20 rows with a 1 MB reason each, written by hand) makes every reload take a while,
    // and another replica writing all the time makes A reload at every refresh: many of A's own writes
    // then land while a reload whose snapshot predates them is still arriving.
    await fx.pool.query(
      `INSERT INTO wardline_revocations (tenant, identity, reason) SELECT 'bulk', 'user-' || i, repeat('x', 1000000) FROM generate_series(1, 20) AS i`,
    )
    const a = await replicaList()
    const other = await replicaList()
    let writing = true
    const noise = (async () => {
      for (let i = 0; writing; i++) await other.revoke({ identity: `noise-${i}`, tenant: 'acme', until: null })
    })()
    try {
      for (let i = 0; i < 30; i++) {
        await a.revoke({ identity: `w-${i}`, tenant: 'acme', until: null })
        const until = performance.now() + 300
        while (performance.now() < until) {
          expect(a.isRevoked({ tenant: 'acme', identity: `w-${i}` }, Date.now())).toBe(true)
          await shift(1)
        }
      }
    } finally {
      writing = false
      await noise
    }
  }, 60_000)

  test('odd values survive the table exactly: quotes, backslash, SQL, UTF-8, 256 bytes; case matters', async () => {
    const a = await replicaList()
    const b = await replicaList()
    const odd = ["o'brien", '"; DROP TABLE wardline_revocations; --', 'back\\slash', '🦊josé', 'x'.repeat(256), 'Alice']
    for (const identity of odd) await a.revoke({ identity, tenant: "t'1", until: null, reason: "it's \\ fine" })
    await waitFor(() => b.size === odd.length, { what: 'B to load every odd revocation' })
    for (const identity of odd) expect(b.isRevoked({ tenant: "t'1", identity: identity }, Date.now())).toBe(true)
    expect(b.isRevoked({ tenant: "t'1", identity: 'alice' }, Date.now())).toBe(false)
    expect((await b.list()).map((r) => [r.kind === 'identity' && r.identity, r.reason])).toEqual(
      [...odd].sort((x, y) => (x < y ? -1 : 1)).map((identity) => [identity, "it's \\ fine"]),
    )
    await expect(a.revoke({ identity: 'nul\0byte', tenant: 'acme', until: null })).rejects.toThrow('identity contains control characters')
    expect((await fx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM wardline_revocations')).rows[0].n).toBe(odd.length)
  })

  test('an until already passed never applies; one that passes stops applying at once; expired rows are deleted', async () => {
    const b = await replicaList({ cleanupIntervalMs: 100 })
    await fx.pool.query(`INSERT INTO wardline_revocations (tenant, identity, until) VALUES
      ('acme', 'past', clock_timestamp() - interval '1 second'),
      ('acme', 'soon', clock_timestamp() + interval '1.5 seconds'),
      ('acme', 'forever', NULL),
      ('acme', 'inf', 'infinity')`)
    await waitFor(() => b.isRevoked({ tenant: 'acme', identity: 'soon' }, Date.now()), { what: 'B to load the new rows' })
    expect(b.isRevoked({ tenant: 'acme', identity: 'past' }, Date.now())).toBe(false)
    expect(b.isRevoked({ tenant: 'acme', identity: 'inf' }, Date.now())).toBe(true)
    await waitFor(() => !b.isRevoked({ tenant: 'acme', identity: 'soon' }, Date.now()), { what: '"soon" to end' })
    expect(b.isRevoked({ tenant: 'acme', identity: 'forever' }, Date.now())).toBe(true)
    await waitFor(async () => (await fx.pool.query('SELECT identity FROM wardline_revocations ORDER BY 1')).rows.length === 2, {
      what: 'the expired rows to be deleted',
      intervalMs: 50,
    })
    expect((await b.list()).map((r) => [r.kind === 'identity' && r.identity, r.until])).toEqual([
      ['forever', null],
      ['inf', null],
    ])
  })

  test('thousands of revocations: one reload when they change, one tiny row a refresh when they do not (measured)', async () => {
    const b = await replicaList()
    const inserting = performance.now()
    await fx.pool.query(`INSERT INTO wardline_revocations (tenant, identity, reason)
      SELECT 'tenant-' || (i % 50), 'user-' || i, 'bulk' FROM generate_series(1, 10000) AS i`)
    const insertMs = performance.now() - inserting
    const t0 = performance.now()
    const loadedMs = await msUntil(() => b.size === 10_000, t0, 'B to load 10 000 revocations')
    expect(b.isRevoked({ tenant: 'tenant-7', identity: 'user-7' }, Date.now())).toBe(true)
    expect(b.isRevoked({ tenant: 'tenant-7', identity: 'user-8' }, Date.now())).toBe(false)
    // Idle: count B's round trips through a proxy for a second.
    const proxy = await PostgresProxy.start(fx.db.url)
    fx.cleanups.push(() => proxy.close())
    const watched = await replicaList({ url: proxy.urlFor(fx.db.url) })
    expect(watched.size).toBe(10_000)
    proxy.roundTrips = 0
    const idleFrom = performance.now()
    await shift(1000)
    const idleTrips = proxy.roundTrips
    const idleMs = performance.now() - idleFrom
    console.log(
      `10 000 revocations: inserted in one statement in ${insertMs.toFixed(0)} ms, loaded by another replica ${loadedMs.toFixed(0)} ms after the commit; idle refreshes: ${idleTrips} round trips in ${idleMs.toFixed(0)} ms`,
    )
    expect(idleTrips).toBeGreaterThan(0) // it does poll
  })
})

describe('gateways sharing one database', () => {
  test('revoked through replica A: A refuses at once, B within 1 s, a cached token included; removed through B: both let it back', async () => {
    const a = await startReplica()
    const b = await startReplica()
    const alice = await bearer('alice')
    expect(await status(a, alice)).toBe(200)
    expect(await status(b, alice)).toBe(200) // both caches hold alice's token now
    const seenOnB: number[] = []
    for (let round = 0; round < 5; round++) {
      await shift((round * 61) % 250)
      await a.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null, reason: `round ${round}` })
      const t0 = performance.now()
      expect(await status(a, alice)).toBe(401)
      seenOnB.push(await msUntil(async () => (await status(b, alice)) === 401, t0, 'B to refuse alice'))
      expect(await b.gateway.revocations.remove({ identity: 'alice', tenant: 'acme' })).toBe(true)
      const t1 = performance.now()
      expect(await status(b, alice)).toBe(200)
      seenOnB.push(await msUntil(async () => (await status(a, alice)) === 200, t1, 'A to let alice back'))
    }
    console.log(`through gateways (HTTP polling): ${summary(seenOnB)}`)
    // A refresh that failed (a query timed out on a loaded machine) would explain a slow one: say so.
    expect([...a.logs, ...b.logs].filter((l) => String(l.message).startsWith('revocation list refresh failed'))).toEqual([])
    expect(Math.max(...seenOnB)).toBeLessThanOrEqual(PROMISE_MS + TOLERANCE_MS)
    // Every 401 each replica answered is one audit entry with reason `revoked identity` (the polls that still got
    // 200 are allows), and nothing else was refused.
    for (const replica of [a, b]) {
      await replica.gateway.audit.flush()
      const entries = readJsonl(replica.auditFile)
      const refused = entries.filter((e) => e.status === 401)
      expect(refused.length).toBeGreaterThanOrEqual(5)
      expect(refused.every((e) => e.decision === 'unauthorized' && e.reason === 'revoked identity' && e.identity === 'alice')).toBe(true)
      expect(await metricSample(replica.url, 'wardline_revoked_requests_total')).toBe(refused.length)
      expect(entries.filter((e) => e.decision === 'unauthorized')).toHaveLength(refused.length)
    }
  })

  test('tenant "default" is the tenant of a token without one; identity * revokes a whole tenant across replicas', async () => {
    const a = await startReplica()
    const b = await startReplica()
    await a.gateway.revocations.revoke({ identity: 'dora', tenant: 'default', until: null })
    await a.gateway.revocations.revoke({ identity: '*', tenant: 'globex', until: null })
    await waitFor(async () => (await status(b, await bearer('dora', null))) === 401, { what: 'B to refuse dora without a tenant' })
    expect(await status(b, await bearer('dora', 'acme'))).toBe(200)
    expect(await status(b, await bearer('anyone', 'globex'))).toBe(401)
    expect(await status(b, await bearer('anyone', 'Globex'))).toBe(200)
    expect(await readyz(b)).toMatchObject({ revocations: 'ok', revocations_storage: 'postgres', revocations_active: 2 })
    expect(await metricSample(b.url, 'wardline_revocations_active')).toBe(2)
  })

  test('database outage: the last list is kept and judged on, /readyz says stale, a metric counts; it catches up after', async () => {
    const proxy = await PostgresProxy.start(fx.db.url)
    fx.cleanups.push(() => proxy.close())
    const a = await startReplica(proxy.urlFor(fx.db.url))
    await a.gateway.revocations.revoke({ identity: 'alice', tenant: 'acme', until: null })
    expect(await readyz(a)).toMatchObject({ revocations: 'ok' })
    proxy.refuse()
    const stale = await waitFor(
      async () => {
        const body = await readyz(a)
        return body.revocations === 'stale' && body
      },
      { what: '/readyz to call the list stale' },
    )
    expect(stale).toMatchObject({ revocations_active: 1, revocations_storage: 'postgres' })
    expect(typeof stale.revocations_error).toBe('string')
    console.log(`/readyz while the database is away: ${JSON.stringify(stale)}`)
    expect(await metricSample(a.url, 'wardline_revocation_refresh_failures_total')).toBeGreaterThan(0)
    await waitFor(async () => (await metricSample(a.url, 'wardline_revocations_stale_seconds')) > 0, { what: 'the stale age metric' })
    // Judged on the last list: alice still refused, bob still served.
    expect(await status(a, await bearer('alice'))).toBe(401)
    expect(await status(a, await bearer('bob'))).toBe(200)
    // A revocation made elsewhere during the outage (straight into the table) reaches A once it is back.
    await fx.pool.query(`INSERT INTO wardline_revocations (tenant, identity) VALUES ('acme', 'bob')`)
    expect(await status(a, await bearer('bob'))).toBe(200)
    const warnings = a.logs.filter((l) => String(l.message).startsWith('revocation list refresh failed'))
    expect(warnings).toHaveLength(1) // rate-limited: one line, not four a second
    proxy.allow()
    await waitFor(async () => (await status(a, await bearer('bob'))) === 401, { what: 'A to learn of bob once the database is back' })
    await waitFor(async () => (await readyz(a)).revocations === 'ok', { what: '/readyz to call the list ok again' })
    expect(await metricSample(a.url, 'wardline_revocations_stale_seconds')).toBe(0)
  })

  test('started during an outage: the list is empty and stale, then loads once the database answers', async () => {
    await fx.pool.query(`INSERT INTO wardline_revocations (tenant, identity) VALUES ('acme', 'alice')`)
    const proxy = await PostgresProxy.start(fx.db.url)
    fx.cleanups.push(() => proxy.close())
    proxy.refuse()
    const a = await startReplica(proxy.urlFor(fx.db.url))
    expect(await readyz(a)).toMatchObject({ revocations: 'stale', revocations_active: 0 })
    expect(await status(a, await bearer('alice'))).toBe(200) // documented: nothing is known yet
    proxy.allow()
    await waitFor(async () => (await status(a, await bearer('alice'))) === 401, {
      what: 'A to load the list',
      timeoutMs: 20_000,
      intervalMs: 50,
    })
    expect(await readyz(a)).toMatchObject({ revocations: 'ok', revocations_active: 1 })
  }, 40_000)
})
