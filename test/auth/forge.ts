/** Token forgery for the auth tests: real jose signing, so every token is what an attacker could send. */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { type CryptoKey, type JWK, type JWTPayload, SignJWT, exportJWK, generateKeyPair } from 'jose'

export const SECRET = 'a-test-secret-that-is-long-enough-0123456789'

export const hour = (): number => Math.floor(Date.now() / 1000) + 3600

export async function hs(payload: JWTPayload, secret = SECRET, alg = 'HS256', header: Record<string, unknown> = {}): Promise<string> {
  return new SignJWT(payload).setProtectedHeader({ alg, ...header }).sign(new TextEncoder().encode(secret))
}

/** header.payload. with alg none: what a naive verifier accepts. */
export function unsigned(payload: JWTPayload): string {
  const part = (o: unknown): string => Buffer.from(JSON.stringify(o)).toString('base64url')
  return `${part({ alg: 'none', typ: 'JWT' })}.${part(payload)}.`
}

export interface KeyPair {
  readonly kid: string
  readonly privateKey: CryptoKey
  readonly jwk: JWK
}

export async function rsaKey(kid: string, alg = 'RS256'): Promise<KeyPair> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true })
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' }
  return { kid, privateKey, jwk }
}

export async function signWith(key: KeyPair, payload: JWTPayload, alg = 'RS256'): Promise<string> {
  return new SignJWT(payload).setProtectedHeader({ alg, kid: key.kid }).sign(key.privateKey)
}

/** A real JWKS endpoint on port 0 whose key list the test changes, and which counts its fetches. */
export interface JwksServer {
  readonly url: string
  keys: JWK[]
  fetches: number
  /** performance.now() when the last fetch arrived (-Infinity before any): a cooldown runs from about then. */
  lastFetchAt: number
  /** When true, every fetch gets a 503 (an identity provider in trouble). */
  failing: boolean
  /** While set, every fetch is answered only once this settles (a slow identity provider). */
  hold: Promise<void> | null
  close(): Promise<void>
}

export async function startJwksServer(keys: JWK[]): Promise<JwksServer> {
  const state = { keys, fetches: 0, lastFetchAt: Number.NEGATIVE_INFINITY, failing: false, hold: null as Promise<void> | null }
  const server: Server = createServer((_req, res) => {
    state.fetches++
    state.lastFetchAt = performance.now()
    const answer = (): void => {
      if (state.failing) {
        res.writeHead(503).end()
        return
      }
      res.writeHead(200, { 'content-type': 'application/jwk-set+json' })
      res.end(JSON.stringify({ keys: state.keys }))
    }
    if (state.hold === null) answer()
    else void state.hold.then(answer)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  })
}

/** Accepts connections and never answers: an identity provider that hangs. Counts the requests it got. */
export async function startSilentServer(): Promise<{ url: string; readonly requests: number; close(): Promise<void> }> {
  let requests = 0
  const server = createServer(() => void requests++)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}/jwks.json`,
    get requests() {
      return requests
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
