/**
 * Keys from a JSON Web Key Set: a real JWKS server on port 0 (rotation, outage, a provider that hangs)
 * and a JWKS file, all through a real gateway.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { type Harness, MCP_HEADERS, rpc, startHarness, tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type JwksServer, hour, rsaKey, signWith, startJwksServer, startSilentServer } from './forge'

const CLAIMS = { sub: 'alice', tenant: 'acme' }

/** Half the default jwks_timeout_seconds (5 s): a bound that tells the 0.3 s configured below apart from it, with room for a loaded machine. */
const FAR_BELOW_THE_DEFAULT_TIMEOUT_MS = 2_500

/**
 * The JWKS cooldown runs on the gateway's own clock (performance.now() in src/auth/keys.ts; no clock can
 * be injected there), so a test waits it out: until `cooldownMs` have passed since the provider received
 * the last fetch, which is no earlier than the moment the gateway started that attempt.
 */
function cooldownOver(jwks: JwksServer, cooldownMs: number): Promise<boolean> {
  return waitFor(() => performance.now() - jwks.lastFetchAt > cooldownMs, {
    what: `the ${cooldownMs} ms JWKS cooldown to pass`,
    intervalMs: 20,
  })
}

async function listTools(h: Harness, token: string): Promise<{ status: number; message?: string }> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` },
    body: JSON.stringify(rpc('tools/list')),
  })
  const body = (await res.json()) as { error: { message: string } }
  return res.status === 200 ? { status: 200 } : { status: res.status, message: body.error.message }
}

describe('a remote JWKS', () => {
  let jwks: JwksServer
  let h: Harness
  afterEach(async () => {
    await h?.close()
    await jwks?.close()
  })

  test('a new kid published by the provider is picked up without a restart (key rotation)', async () => {
    const k1 = await rsaKey('k1')
    const k2 = await rsaKey('k2')
    jwks = await startJwksServer([k1.jwk])
    h = await startHarness({
      mode: 'stateless-json',
      config: { auth: { mode: 'jwt', jwt: { jwks_url: jwks.url, algorithms: ['RS256'], jwks_cooldown_seconds: 0 } } },
    })
    expect(jwks.fetches).toBe(1) // fetched once at startup, before the first request

    expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 })
    expect(jwks.fetches).toBe(1) // known keys: no fetch on the request path

    const rotated = await signWith(k2, { ...CLAIMS, exp: hour() })
    expect(await listTools(h, rotated)).toEqual({ status: 401, message: 'Unauthorized: no known signing key matches the token' })
    jwks.keys = [k1.jwk, k2.jwk]
    expect(await listTools(h, rotated)).toEqual({ status: 200 })
    expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 })
  })

  test('an unknown kid refetches at most once per cooldown', async () => {
    const k1 = await rsaKey('k1')
    jwks = await startJwksServer([k1.jwk])
    h = await startHarness({
      mode: 'stateless-json',
      config: { auth: { mode: 'jwt', jwt: { jwks_url: jwks.url, algorithms: ['RS256'] } } },
    })
    const stranger = await signWith(await rsaKey('made-up'), { ...CLAIMS, exp: hour() })
    for (let i = 0; i < 5; i++) expect((await listTools(h, stranger)).status).toBe(401)
    expect(jwks.fetches).toBe(1) // the startup fetch is within the 30 s cooldown
  })

  test('when the provider goes down, known keys keep working and an unknown kid gets a clear 401', async () => {
    const k1 = await rsaKey('k1')
    jwks = await startJwksServer([k1.jwk])
    h = await startHarness({
      mode: 'stateless-json',
      config: { auth: { mode: 'jwt', jwt: { jwks_url: jwks.url, algorithms: ['RS256'], jwks_cooldown_seconds: 0 } } },
    })
    await jwks.close()
    expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 })
    const unknown = await signWith(await rsaKey('k9'), { ...CLAIMS, exp: hour() })
    expect(await listTools(h, unknown)).toEqual({ status: 401, message: 'Unauthorized: signing keys unavailable' })
    const entry = (await h.audit()).at(-1)
    expect(entry?.decision).toBe('unauthorized')
    expect(entry?.reason).toMatch(/^signing keys unavailable \(WL_AUTH_KEYS_UNAVAILABLE: JWKS fetch failed: .*ECONNREFUSED.*\)$/)
    expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 })
  })

  test('while the provider fails, made-up kids cost it one fetch per cooldown, not one per request', async () => {
    // Long enough for the 41 requests below to fit in one cooldown on a loaded machine, short enough to wait out twice.
    const cooldownMs = 2_000
    const k1 = await rsaKey('k1')
    jwks = await startJwksServer([k1.jwk])
    h = await startHarness({
      mode: 'stateless-json',
      config: { auth: { mode: 'jwt', jwt: { jwks_url: jwks.url, algorithms: ['RS256'], jwks_cooldown_seconds: cooldownMs / 1000 } } },
    })
    jwks.failing = true
    await cooldownOver(jwks, cooldownMs) // the startup fetch's
    const strangers = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => signWith(await rsaKey(`made-up-${i}`), { ...CLAIMS, exp: hour() })),
    )
    const answers = await Promise.all(strangers.map((t) => listTools(h, t)))
    expect(answers.every((a) => a.status === 401)).toBe(true)
    expect(jwks.fetches).toBe(2) // the startup fetch, then one failed attempt shared by all twenty
    for (const t of strangers) expect((await listTools(h, t)).message).toBe('Unauthorized: signing keys unavailable')
    expect(jwks.fetches).toBe(2) // a failed attempt starts the cooldown too
    expect((await h.audit()).at(-1)?.reason).toMatch(
      /^signing keys unavailable \(WL_AUTH_KEYS_UNAVAILABLE: JWKS fetch failed: Expected 200 OK/,
    )
    expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 }) // known keys still work

    await cooldownOver(jwks, cooldownMs) // the failed attempt's
    jwks.failing = false
    expect((await listTools(h, strangers[0])).message).toBe('Unauthorized: no known signing key matches the token')
    expect(jwks.fetches).toBe(3) // after the cooldown, one new attempt
  })

  test('a provider that never answers costs a request no more than jwks_timeout_seconds, and the gateway stays up', async () => {
    const silent = await startSilentServer()
    try {
      const started = performance.now()
      h = await startHarness({
        mode: 'stateless-json',
        config: {
          auth: { mode: 'jwt', jwt: { jwks_url: silent.url, algorithms: ['RS256'], jwks_timeout_seconds: 0.3, jwks_cooldown_seconds: 0 } },
        },
      })
      expect(performance.now() - started).toBeLessThan(FAR_BELOW_THE_DEFAULT_TIMEOUT_MS) // the startup fetch is bounded too
      expect(silent.requests).toBe(1)
      const token = await signWith(await rsaKey('k1'), { ...CLAIMS, exp: hour() })
      for (let i = 0; i < 2; i++) {
        const t0 = performance.now()
        expect(await listTools(h, token)).toEqual({ status: 401, message: 'Unauthorized: signing keys unavailable' })
        const elapsed = performance.now() - t0
        expect(silent.requests).toBe(2 + i) // cooldown 0: each request asked the provider again, and waited for it
        expect(elapsed).toBeGreaterThanOrEqual(250) // a lower bound: a loaded machine only makes it longer
        expect(elapsed).toBeLessThan(FAR_BELOW_THE_DEFAULT_TIMEOUT_MS)
      }
      expect((await h.audit()).at(-1)?.reason).toBe('signing keys unavailable (WL_AUTH_KEYS_UNAVAILABLE: JWKS fetch timed out after 0.3s)')
      expect((await fetch(`${h.url}/healthz`)).status).toBe(200)
    } finally {
      await h?.close()
      await silent.close()
    }
  })

  test('within the cooldown after a failed fetch, a request is answered at once instead of waiting on a hung provider', async () => {
    const silent = await startSilentServer()
    try {
      h = await startHarness({
        mode: 'stateless-json',
        config: { auth: { mode: 'jwt', jwt: { jwks_url: silent.url, algorithms: ['RS256'], jwks_timeout_seconds: 0.3 } } },
      })
      const token = await signWith(await rsaKey('k1'), { ...CLAIMS, exp: hour() })
      expect(silent.requests).toBe(1) // the startup fetch, which timed out and started the 30 s cooldown
      expect(await listTools(h, token)).toEqual({ status: 401, message: 'Unauthorized: signing keys unavailable' })
      // Answered without asking the hung provider again, so without waiting the 0.3 s on it.
      expect(silent.requests).toBe(1)
      expect((await h.audit()).at(-1)?.reason).toBe('signing keys unavailable (WL_AUTH_KEYS_UNAVAILABLE: JWKS fetch timed out after 0.3s)')
    } finally {
      await h?.close()
      await silent.close()
    }
  })
})

describe('a JWKS file', () => {
  test('tokens signed by any key in the file verify; others do not', async () => {
    const k1 = await rsaKey('k1')
    const k2 = await rsaKey('k2', 'ES256')
    const dir = tempDir()
    writeFileSync(join(dir, 'jwks.json'), JSON.stringify({ keys: [k1.jwk, k2.jwk] }))
    const h = await startHarness({
      mode: 'stateless-json',
      config: { auth: { mode: 'jwt', jwt: { jwks_file: join(dir, 'jwks.json'), algorithms: ['RS256', 'ES256'] } } },
    })
    try {
      expect(await listTools(h, await signWith(k1, { ...CLAIMS, exp: hour() }))).toEqual({ status: 200 })
      expect(await listTools(h, await signWith(k2, { ...CLAIMS, exp: hour() }, 'ES256'))).toEqual({ status: 200 })
      expect(await listTools(h, await signWith(await rsaKey('k1'), { ...CLAIMS, exp: hour() }))).toEqual({
        status: 401,
        message: 'Unauthorized: bad token signature',
      })
    } finally {
      await h.close()
    }
  })
})
