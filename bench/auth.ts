/**
 * The cost of verifying bearer tokens: tools/call through a gateway in header mode (no
 * crypto: the floor), in jwt mode with the verified-token cache (a client reusing its token, the
 * normal case), and in jwt mode with the cache off (every request pays the HMAC). Plus the
 * verification alone, in process, in ns per token.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { SignJWT, jwtVerify } from 'jose'
import { JwtAuthenticator } from '../src/auth/jwt-authenticator'
import { parseConfig } from '../src/config/load'
import type { JwtConfig } from '../src/config/types'
import { silentLogger } from '../src/log'
import { Exchange } from '../src/pipeline/exchange'
import { benchHeaders, startBenchGateway, startRawUpstream, toolCallLoad } from './fixtures'
import { type BenchSection, interleave, median, summarize } from './load'

export const JWT_SECRET = 'bench-secret-that-is-long-enough-for-hs256-0123456789'

const jwtAuth = (cacheEntries: number): Record<string, unknown> => ({
  mode: 'jwt',
  jwt: { secret: JWT_SECRET, cache_entries: cacheEntries },
})

export async function benchToken(): Promise<string> {
  const now = Math.floor(Date.now() / 1000)
  return new SignJWT({ sub: 'bench', tenant: 'acme' })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt(now)
    .setExpirationTime(now + 3600)
    .sign(new TextEncoder().encode(JWT_SECRET))
}

const auth: BenchSection = {
  name: 'auth',
  budgetSeconds: 25,
  async run(ctx) {
    const token = await benchToken()
    // In process first, before the worker threads and 30 s of load share this process's thread pool.
    const micro = await verifyNanoseconds(token)
    const upstream = await startRawUpstream()
    const header = await startBenchGateway(upstream.url)
    const cached = await startBenchGateway(upstream.url, { auth: jwtAuth(10_000) })
    const uncached = await startBenchGateway(upstream.url, { auth: jwtAuth(0) })
    try {
      const load = toolCallLoad(ctx, { ...benchHeaders(), authorization: `Bearer ${token}` })
      ctx.progress(`auth: ${ctx.rounds} rounds of ${ctx.roundMs} ms each for header / jwt cached / jwt uncached`)
      const rounds = await interleave(ctx.rounds, { header: load(header.url), cached: load(cached.url), uncached: load(uncached.url) })
      const h = summarize(rounds.header)
      const c = summarize(rounds.cached)
      const u = summarize(rounds.uncached)
      return [
        { label: 'tools/call, header auth (no crypto)', result: h },
        { label: 'tools/call, jwt HS256, token cache on', result: c, note: `×${(c.reqPerSec / h.reqPerSec).toFixed(3)} of header auth` },
        {
          label: 'tools/call, jwt HS256, token cache off',
          result: u,
          note: `×${(u.reqPerSec / h.reqPerSec).toFixed(3)} of header auth, ×${(u.reqPerSec / c.reqPerSec).toFixed(3)} of cache on`,
        },
        { label: 'authenticate alone, cache hit', note: `${micro.hit.toFixed(0)} ns per token, in process` },
        {
          label: 'verify alone, HS256 with the imported CryptoKey',
          note: `${micro.miss.toFixed(0)} ns per token (×${(micro.miss / micro.hit).toFixed(0)} a cache hit)`,
        },
        {
          label: 'verify alone, HS256 from raw secret bytes',
          note: `${micro.raw.toFixed(0)} ns per token (×${(micro.raw / micro.miss).toFixed(2)} the CryptoKey)`,
        },
      ]
    } finally {
      await uncached.close()
      await cached.close()
      await header.close()
      await upstream.close()
    }
  },
}

/**
 * ns per verification on this thread: a request's cache hit (authenticate), the full HS256 check with the imported CryptoKey,
 * and jose given the secret's raw bytes (what importing once saves). Five interleaved rounds of
 * ~150 ms each, medians, because the machine is shared.
 */
async function verifyNanoseconds(token: string): Promise<{ hit: number; miss: number; raw: number }> {
  const authenticator = await JwtAuthenticator.open(jwtConfig(), silentLogger())
  const bytes = new TextEncoder().encode(JWT_SECRET)
  const authorization = `Bearer ${token}`
  const incoming = { method: 'POST', url: '/mcp', headers: { authorization }, rawHeaders: ['Authorization', authorization] }
  const request = new Exchange(incoming as unknown as IncomingMessage, {} as ServerResponse, 'bench', 0, 0)
  const ops = {
    // A request's path: authenticate() on the header as Node parsed it (the cache is keyed by it).
    hit: async () => void (await authenticator.authenticate(request)),
    miss: async () => void (await authenticator.verifyUncached(token)),
    raw: async () => void (await jwtVerify(token, bytes, { algorithms: ['HS256'] })),
  }
  const samples: Record<keyof typeof ops, number[]> = { hit: [], miss: [], raw: [] }
  try {
    for (const op of Object.values(ops)) for (let i = 0; i < 1_000; i++) await op()
    for (let round = 0; round < 5; round++) {
      for (const name of Object.keys(ops) as Array<keyof typeof ops>) samples[name].push(await timeLoop(ops[name]))
    }
    return { hit: median(samples.hit), miss: median(samples.miss), raw: median(samples.raw) }
  } finally {
    authenticator.close()
  }
}

function jwtConfig(): JwtConfig {
  const config = parseConfig(JSON.stringify({ upstream: 'http://127.0.0.1:1', auth: jwtAuth(10_000) }), { env: {} })
  if (config.auth.mode !== 'jwt') throw new Error('expected jwt auth')
  return config.auth.jwt
}

async function timeLoop(op: () => Promise<void>): Promise<number> {
  let n = 0
  const started = performance.now()
  while (performance.now() - started < 150) {
    for (let i = 0; i < 100; i++) await op()
    n += 100
  }
  return ((performance.now() - started) * 1e6) / n
}

export const sections: BenchSection[] = [auth]
