/**
 * Revocation by token id (jti) and by issue time with Postgres storage: real Postgres, two gateways on
 * one database as replicas are, tokens minted by `wardline token` and revoked by `wardline revoke` as an
 * operator does (the CLI in a child process, against replica A's admin listener), the outcome read on
 * replica B as a client sees it. Also: migration 8 on a database that already holds identity revocations.
 */
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { PostgresRevocationList } from '../../src/auth/revocations-postgres'
import { mintToken } from '../../src/cli/token'
import { loadConfig } from '../../src/config/load'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { MIGRATIONS } from '../../src/postgres/migrations'
import type { Principal } from '../../src/pipeline/exchange'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { SECRET } from '../auth/forge'
import { ROOT, cliMain, freePort } from '../helpers/cli'
import { echoStatus, readJsonl, tempDir } from '../helpers/harness'
import { freshDatabase, testPool } from '../helpers/postgres'
import { revocationDatabase } from '../helpers/revocation-database'
import { waitFor } from '../helpers/wait'

/** The promise (docs/operations.md): a revocation reaches every replica within 1 s; plus room for a loaded machine. */
const BOUND_MS = 1250
const ADMIN_TOKEN = 'token-revocations-admin-0123456789abcdef'

const fx = revocationDatabase(4)

interface Replica {
  readonly gateway: RunningGateway
  readonly url: string
  readonly configFile: string
  readonly auditFile: string
}

/** A whole gateway with Postgres storage and JWT auth, its config in a file (the CLI reads it), admin on a fixed port. */
async function startReplica(): Promise<Replica> {
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const configFile = join(dir, 'wardline.yaml')
  writeFileSync(
    configFile,
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: fx.upstream.url,
      auth: { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } },
      audit: { output: auditFile, spill_file: join(dir, 'spill.jsonl') },
      features: { budget_enforcement: false, postgres_storage: true },
      postgres: { dsn: fx.db.url, max_connections: 4 },
      admin: { listen: `127.0.0.1:${await freePort()}`, token: ADMIN_TOKEN },
    }),
  )
  const gateway = await startGateway(loadConfig(configFile, {}), { log: silentLogger() })
  fx.cleanups.push(() => gateway.shutdown())
  return { gateway, url: gateway.url, configFile, auditFile }
}

/** `wardline <args>` in a child process, awaited without blocking this process (the gateways answer it). */
function cli(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cliMain(), ...args], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' } })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')))
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')))
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** A token minted by `wardline token --json` for the replica's config: the token and its jti. */
async function minted(replica: Replica, sub: string, tenant = 'acme'): Promise<{ bearer: Record<string, string>; jti: string }> {
  const r = await cli(['token', '--config', replica.configFile, '--sub', sub, '--tenant', tenant, '--ttl', '1h', '--json'])
  expect(r.code).toBe(0)
  const answer = JSON.parse(r.stdout) as { token: string; jti: string }
  return { bearer: { authorization: `Bearer ${answer.token}` }, jti: answer.jti }
}

function status(replica: Replica, headers: Record<string, string>): Promise<number> {
  return echoStatus(replica.url, headers)
}

describe('gateways sharing one database', () => {
  test('a jti revoked with the CLI on A: B refuses that token within 1 s, a cached one, while another token of the same identity works', async () => {
    const a = await startReplica()
    const b = await startReplica()
    const leaked = await minted(a, 'alice')
    const kept = await minted(a, 'alice')
    expect(leaked.jti).not.toBe(kept.jti)
    for (const replica of [a, b]) for (const t of [leaked, kept]) expect(await status(replica, t.bearer)).toBe(200) // cached now
    const revoked = await cli(['revoke', '--config', a.configFile, '--jti', leaked.jti, '--reason', 'pasted in a ticket'])
    expect(revoked).toMatchObject({ code: 0, stderr: '' })
    expect(revoked.stdout).toBe(`revoked token jti ${leaked.jti} until lifted\n`)
    const t0 = performance.now()
    expect(await status(a, leaked.bearer)).toBe(401) // at once on the replica that took it
    await waitFor(async () => (await status(b, leaked.bearer)) === 401, { what: 'B to refuse the leaked token', intervalMs: 5 })
    const ms = performance.now() - t0
    console.log(`jti revoked through the CLI on A, refused on B after ${ms.toFixed(0)} ms`)
    expect(ms).toBeLessThanOrEqual(BOUND_MS)
    expect(await status(b, kept.bearer)).toBe(200)
    expect(await status(a, kept.bearer)).toBe(200)

    const list = await cli(['revoke', '--config', b.configFile, '--list'])
    expect(list.stdout).toMatch(
      new RegExp(
        `^KIND\\s+TENANT\\s+IDENTITY\\s+JTI\\s+ISSUED BEFORE\\s+UNTIL\\s+SINCE\\s+REASON\\njti\\s+-\\s+-\\s+${leaked.jti}\\s+-\\s+until lifted\\s+\\S+\\s+pasted in a ticket\\n$`,
      ),
    )
    await b.gateway.audit.flush()
    const refused = readJsonl(b.auditFile).filter((e) => e.status === 401)
    expect(refused.length).toBeGreaterThanOrEqual(1)
    for (const e of refused) expect(e).toMatchObject({ identity: 'alice', tenant: 'acme', reason: `revoked token (jti "${leaked.jti}")` })
    const token = leaked.bearer.authorization.slice('Bearer '.length)
    expect(JSON.stringify(readJsonl(b.auditFile))).not.toContain(token.split('.')[2])

    const lifted = await cli(['revoke', '--config', b.configFile, '--remove', '--jti', leaked.jti])
    expect(lifted.stdout).toBe(`lifted the revocation of token jti ${leaked.jti}\n`)
    await waitFor(async () => (await status(a, leaked.bearer)) === 200, { what: 'A to let the token back' })
  })

  test('issued before now, with the CLI on A: B refuses the old token, cached, and takes one minted afterwards; other identities are untouched', async () => {
    const a = await startReplica()
    const b = await startReplica()
    const config = loadConfig(a.configFile, {})
    // Minted ten minutes ago (its iat says so), still valid: the leaked kind.
    const old = {
      authorization: `Bearer ${await mintToken(config, { sub: 'bob', tenant: 'acme', ttlSeconds: 3600 }, () => Date.now() - 600_000)}`,
    }
    const carol = {
      authorization: `Bearer ${await mintToken(config, { sub: 'carol', tenant: 'acme', ttlSeconds: 3600 }, () => Date.now() - 600_000)}`,
    }
    expect(await status(b, old)).toBe(200)
    expect(await status(b, old)).toBe(200)
    const made = await cli(['revoke', '--config', a.configFile, '--identity', 'bob', '--tenant', 'acme', '--issued-before', 'now'])
    expect(made.code).toBe(0)
    expect(made.stdout).toMatch(
      /^revoked the tokens of bob in tenant acme issued before \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z until lifted\n$/,
    )
    await waitFor(async () => (await status(b, old)) === 401, { what: 'B to refuse the old token', timeoutMs: BOUND_MS, intervalMs: 5 })
    const fresh = await minted(a, 'bob') // at once: the whole second of "now" keeps it
    expect(await status(b, fresh.bearer)).toBe(200)
    expect(await status(a, fresh.bearer)).toBe(200)
    expect(await status(b, carol)).toBe(200)
    const list = await b.gateway.revocations.list()
    expect(list).toEqual([expect.objectContaining({ kind: 'issued_before', identity: 'bob', tenant: 'acme', until: null })])
    const lifted = await cli(['revoke', '--config', a.configFile, '--remove', '--identity', 'bob', '--tenant', 'acme', '--issued-before'])
    expect(lifted.stdout).toBe('lifted the issued-before revocation of bob in tenant acme\n')
    await waitFor(async () => (await status(b, old)) === 200, { what: 'B to take the old token again' })
  })
})

describe('two lists on one database', () => {
  async function replicaList(): Promise<PostgresRevocationList> {
    const listPool = testPool(fx.db.url, 2)
    const list = new PostgresRevocationList(listPool, { log: silentLogger(), cleanupIntervalMs: 100 })
    fx.cleanups.push(() => listPool.end())
    fx.cleanups.push(() => list.close())
    await list.start()
    return list
  }
  const token = (identity: string, tokenId: string | null, issuedAtMs: number | null): Principal => ({
    identity,
    tenant: 'acme',
    tokenId,
    issuedAt: issuedAtMs === null ? null : issuedAtMs / 1000,
  })

  test('every kind reaches the other list, lists the same on both, and is lifted on both', async () => {
    const a = await replicaList()
    const b = await replicaList()
    const t = Date.now()
    await a.revoke({ identity: 'dan', tenant: 'acme', until: null })
    await a.revoke({ kind: 'jti', jti: `o'brien "x" \\ 🦊`, until: null, reason: 'odd' })
    await a.revoke({ kind: 'issued_before', identity: '*', tenant: 'acme', issuedBefore: new Date(t - 60_000), until: null })
    await waitFor(() => b.size === 3, { what: 'B to load the three kinds' })
    expect(b.isRevoked(token('dan', 'x', t), t)).toBe(true)
    expect(b.isRevoked(token('eve', `o'brien "x" \\ 🦊`, t), t)).toBe(true)
    expect(b.isRevoked(token('eve', 'other', t - 120_000), t)).toBe(true)
    expect(b.isRevoked(token('eve', 'other', t), t)).toBe(false)
    expect(await b.list()).toEqual(await a.list())
    expect((await b.list()).map((r) => r.kind)).toEqual(['identity', 'issued_before', 'jti'])
    expect(await b.remove({ kind: 'jti', jti: `o'brien "x" \\ 🦊` })).toBe(true)
    expect(await b.remove({ kind: 'issued_before', identity: '*', tenant: 'acme' })).toBe(true)
    expect(await b.remove({ kind: 'issued_before', identity: '*', tenant: 'acme' })).toBe(false)
    await waitFor(() => a.size === 1, { what: 'A to drop the lifted ones' })
    expect(a.isRevoked(token('eve', `o'brien "x" \\ 🦊`, t - 120_000), t)).toBe(false)
    expect(a.isRevoked(token('dan', null, null), t)).toBe(true)
  })

  test('rows written by hand in the new tables reach the lists; expired ones are deleted; a TRUNCATE reaches them too', async () => {
    const b = await replicaList()
    await fx.pool.query(
      `INSERT INTO wardline_token_revocations (jti, until) VALUES ('gone', clock_timestamp() - interval '1 second'), ('soon', clock_timestamp() + interval '1 second')`,
    )
    await fx.pool.query(
      `INSERT INTO wardline_issued_before_revocations (tenant, identity, issued_before) VALUES ('acme', 'fred', clock_timestamp())`,
    )
    await waitFor(() => b.isRevoked(token('x', 'soon', null), Date.now()), { what: 'B to load the rows' })
    expect(b.isRevoked(token('x', 'gone', null), Date.now())).toBe(false)
    expect(b.isRevoked(token('fred', 'k', Date.now() - 10_000), Date.now())).toBe(true)
    await waitFor(async () => (await fx.pool.query('SELECT jti FROM wardline_token_revocations')).rows.length === 0, {
      what: 'the expired jti rows to be deleted',
      intervalMs: 50,
    })
    await fx.pool.query('TRUNCATE wardline_issued_before_revocations')
    await waitFor(() => b.size === 0, { what: 'B to see the truncate' })
  })
})

describe('migration 8 on an existing schema', () => {
  test('a database at version 7 with identity revocations keeps them, gains the new tables, and a list reads all kinds', async () => {
    const old = await freshDatabase()
    const oldPool = testPool(old.url, 2)
    fx.cleanups.push(() => old.drop())
    fx.cleanups.push(() => oldPool.end())
    expect((await migrate(oldPool, silentLogger(), MIGRATIONS.slice(0, 7))).version).toBe(7)
    await oldPool.query(`INSERT INTO wardline_revocations (tenant, identity, reason) VALUES ('acme', 'alice', 'kept'), ('acme', '*', NULL)`)
    const versionBefore = (await oldPool.query<{ v: string }>('SELECT version::text AS v FROM wardline_revocations_version')).rows[0].v
    expect(await migrate(oldPool, silentLogger(), MIGRATIONS.slice(0, 8))).toEqual({ applied: [8], version: 8 })
    const kept = await oldPool.query('SELECT tenant, identity, reason FROM wardline_revocations ORDER BY identity COLLATE "C"')
    expect(kept.rows).toEqual([
      { tenant: 'acme', identity: '*', reason: null },
      { tenant: 'acme', identity: 'alice', reason: 'kept' },
    ])
    const list = new PostgresRevocationList(oldPool, { log: silentLogger() })
    fx.cleanups.push(() => list.close())
    await list.start()
    expect((await list.list()).map((r) => [r.kind, r.kind === 'jti' ? r.jti : r.identity])).toEqual([
      ['identity', '*'],
      ['identity', 'alice'],
    ])
    // The new tables move the same counter (what the replicas poll).
    await list.revoke({ kind: 'jti', jti: 'j1', until: null })
    const versionAfter = (await oldPool.query<{ v: string }>('SELECT version::text AS v FROM wardline_revocations_version')).rows[0].v
    expect(BigInt(versionAfter)).toBeGreaterThan(BigInt(versionBefore))
    expect(list.size).toBe(3)
  })
})
