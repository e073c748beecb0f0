/**
 * Red team (revocation by jti and issued-before, shared through Postgres): these kinds must hold
 * wherever revocation by identity does: through a database outage (the last list kept,
 * /readyz saying stale), against a refresh racing a write on the same replica, and across replicas
 * for a lift. Real Postgres, two replicas (whole gateways), real HS256 tokens.
 */
import { join } from 'node:path'
import { silentLogger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { SECRET, hour, hs } from '../auth/forge'
import { configFrom, echoStatus, tempDir } from '../helpers/harness'
import { PostgresProxy } from '../helpers/postgres-proxy'
import { revocationDatabase } from '../helpers/revocation-database'
import { waitFor } from '../helpers/wait'

const fx = revocationDatabase(2)

async function startReplica(dsn = fx.db.url): Promise<{ gateway: RunningGateway; url: string }> {
  const dir = tempDir()
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: fx.upstream.url,
      auth: { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } },
      audit: { output: join(dir, 'audit.jsonl'), spill_file: join(dir, 'spill.jsonl') },
      features: { budget_enforcement: false, postgres_storage: true },
      postgres: { dsn, max_connections: 4 },
      upstream_health_check: { enabled: false },
    },
    {},
    dir,
  )
  const gateway = await startGateway(config, { log: silentLogger() })
  fx.cleanups.push(() => gateway.shutdown())
  return { gateway, url: gateway.url }
}

const nowS = (): number => Math.floor(Date.now() / 1000)

async function token(sub: string, extra: Record<string, unknown>): Promise<string> {
  return hs({ sub, tenant: 'acme', iss: 'https://idp.example', aud: 'wardline', exp: hour(), ...extra })
}

function status(url: string, bearer: string): Promise<number> {
  return echoStatus(url, { authorization: `Bearer ${bearer}` })
}

test('through a database outage a replica keeps refusing a revoked jti and tokens issued before T, says stale, and serves the rest', async () => {
  const proxy = await PostgresProxy.start(fx.db.url)
  fx.cleanups.push(() => proxy.close())
  const a = await startReplica(proxy.urlFor(fx.db.url))
  const leaked = await token('ann', { jti: 'ann-leaked', iat: nowS() })
  const old = await token('bea', { jti: 'bea-old', iat: nowS() - 600 })
  const other = await token('ann', { jti: 'ann-other', iat: nowS() })
  await a.gateway.revocations.revoke({ kind: 'jti', jti: 'ann-leaked', until: null })
  await a.gateway.revocations.revoke({
    kind: 'issued_before',
    identity: 'bea',
    tenant: 'acme',
    issuedBefore: new Date((nowS() - 60) * 1000),
    until: null,
  })
  proxy.refuse()
  await waitFor(async () => ((await (await fetch(`${a.url}/readyz`)).json()) as Record<string, unknown>).revocations === 'stale', {
    what: '/readyz to call the list stale',
  })
  expect(await status(a.url, leaked)).toBe(401)
  expect(await status(a.url, old)).toBe(401)
  expect(await status(a.url, other)).toBe(200)
  proxy.allow()
  await waitFor(async () => ((await (await fetch(`${a.url}/readyz`)).json()) as Record<string, unknown>).revocations === 'ok', {
    what: '/readyz to call the list ok again',
  })
  expect(await status(a.url, leaked)).toBe(401)
  expect(await status(a.url, old)).toBe(401)
})

test('a jti revoked on A is never let through on A by a refresh that raced the write (20 writes, each watched for 300 ms)', async () => {
  const a = await startReplica()
  for (let i = 0; i < 20; i++) {
    const jti = `race-${i}`
    const t = await token(`r${i}`, { jti, iat: nowS() })
    expect(await status(a.url, t)).toBe(200)
    await a.gateway.revocations.revoke({ kind: 'jti', jti, until: null })
    const until = performance.now() + 300
    while (performance.now() < until) {
      expect(a.gateway.revocations.isRevoked({ identity: `r${i}`, tenant: 'acme', tokenId: jti, issuedAt: nowS() }, Date.now())).toBe(true)
      await new Promise((resolve) => setTimeout(resolve, 5)) // the watch's pace: the 300 ms window is the test, not a wait for an event
    }
  }
})

test('a jti lifted on A is let through on B within 1.25 s, and revoked again on B is refused on A within 1.25 s', async () => {
  const a = await startReplica()
  const b = await startReplica()
  const t = await token('cal', { jti: 'cal-1', iat: nowS() })
  await a.gateway.revocations.revoke({ kind: 'jti', jti: 'cal-1', until: null })
  await waitFor(async () => (await status(b.url, t)) === 401, { what: 'B to refuse cal-1', timeoutMs: 1250, intervalMs: 10 })
  expect(await a.gateway.revocations.remove({ kind: 'jti', jti: 'cal-1' })).toBe(true)
  await waitFor(async () => (await status(b.url, t)) === 200, { what: 'B to let cal-1 back', timeoutMs: 1250, intervalMs: 10 })
  await b.gateway.revocations.revoke({ kind: 'jti', jti: 'cal-1', until: null })
  await waitFor(async () => (await status(a.url, t)) === 401, { what: 'A to refuse cal-1 again', timeoutMs: 1250, intervalMs: 10 })
})

test('a token pasted as a jti or into a reason is refused by the shared list too, and nothing reaches the table', async () => {
  const a = await startReplica()
  const pasted = await token('dee', { jti: 'dee-1' })
  await expect(a.gateway.revocations.revoke({ kind: 'jti', jti: pasted, until: null })).rejects.toThrow(/whole token/)
  await expect(a.gateway.revocations.revoke({ identity: 'dee', tenant: 'acme', until: null, reason: `leaked ${pasted}` })).rejects.toThrow(
    /contains a token/,
  )
  const { rows } = await fx.pool.query<{ n: string }>(
    'SELECT (SELECT count(*) FROM wardline_token_revocations) + (SELECT count(*) FROM wardline_revocations) AS n',
  )
  expect(Number(rows[0].n)).toBe(0)
})
