/**
 * Red team (revocation by jti and issued-before): a revoked token must not get through
 * whatever its claims hold, and an operator's slip must not put a token in the list or the trail.
 * The real gateway in front of the example MCP server, tokens signed for real (HS256).
 */
import { createHmac } from 'node:crypto'
import { type Harness, echoStatus, startHarness } from '../helpers/harness'
import { SECRET, hour, hs } from '../auth/forge'
import { RevocationInputError } from '../../src/auth/revocations'

const ADMIN_TOKEN = 'redteam-admin-token-0123456789abcdef-XYZ'
const JWT = { mode: 'jwt', jwt: { secret: SECRET, issuer: 'https://idp.example', audience: 'wardline' } }

/** A token whose payload is this JSON text byte for byte (jose would re-serialise a number such as 1e400). */
function rawToken(payloadJson: string): string {
  const header = Buffer.from(JSON.stringify({ alg: 'HS256', typ: 'JWT' })).toString('base64url')
  const payload = Buffer.from(payloadJson).toString('base64url')
  const signature = createHmac('sha256', SECRET).update(`${header}.${payload}`).digest('base64url')
  return `${header}.${payload}.${signature}`
}

function status(h: Harness, token: string): Promise<number> {
  return echoStatus(h.url, { authorization: `Bearer ${token}` })
}

const nowS = (): number => Math.floor(Date.now() / 1000)
const base = (sub: string): string => `"sub":"${sub}","tenant":"acme","iss":"https://idp.example","aud":"wardline","exp":${hour()}`

describe('issued-before cannot be dodged by the iat a token carries', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: JWT } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a token whose iat lies in the future (an issuer clock a day ahead) is refused, so issued-before "now" cannot miss it later', async () => {
    const ahead = await hs({
      sub: 'gus',
      tenant: 'acme',
      iss: 'https://idp.example',
      aud: 'wardline',
      exp: hour() + 86_400,
      iat: nowS() + 86_400,
    })
    // Were it admitted, `--issued-before now` would never reach it: issued_before may not lie more
    // than 60 s ahead, and its iat stays after any T an operator can write until tomorrow.
    expect(await status(h, ahead)).toBe(401)
    const audit = (await h.audit()).filter((e) => e.identity === 'gus' || e.decision === 'unauthorized').at(-1)
    expect(audit?.reason).toMatch(/iat/)
  })

  test('iat within the clock tolerance is still accepted (an issuer a few seconds ahead)', async () => {
    const slightly = await hs({ sub: 'hal', tenant: 'acme', iss: 'https://idp.example', aud: 'wardline', exp: hour(), iat: nowS() + 5 })
    expect(await status(h, slightly)).toBe(200)
  })

  test('iat 1e400 (Infinity once parsed) is refused, not a token no issued-before revocation can reach', async () => {
    const infinite = rawToken(`{${base('ida')},"iat":1e400}`)
    expect(await status(h, infinite)).toBe(401)
  })

  test('a fractional iat just before T is refused under issued-before T, one just after is not', async () => {
    const t = nowS() - 30
    const before = rawToken(`{${base('jon')},"iat":${t - 1}.999,"jti":"jon-1"}`)
    const after = rawToken(`{${base('jon')},"iat":${t}.001,"jti":"jon-2"}`)
    expect(await status(h, before)).toBe(200)
    await h.gateway.revocations.revoke({
      kind: 'issued_before',
      identity: 'jon',
      tenant: 'acme',
      issuedBefore: new Date(t * 1000),
      until: null,
    })
    expect(await status(h, before)).toBe(401)
    expect(await status(h, after)).toBe(200)
  })

  test('a string iat is refused outright (jose), never read as "no iat" nor as a number', async () => {
    expect(await status(h, rawToken(`{${base('kim')},"iat":"${nowS()}"}`))).toBe(401)
  })

  test('a numeric jti is no token id: revoking its digits as a string does not reach it (documented), issued-before does', async () => {
    const numeric = rawToken(`{${base('lea')},"iat":${nowS()},"jti":12345}`)
    expect(await status(h, numeric)).toBe(200)
    // Documented: a jti that is not a string is none; its digits as a string name another token.
    await h.gateway.revocations.revoke({ kind: 'jti', jti: '12345', until: null })
    expect(await status(h, numeric)).toBe(200)
    await h.gateway.revocations.revoke({ kind: 'issued_before', identity: 'lea', tenant: 'acme', issuedBefore: new Date(), until: null })
    expect(await status(h, numeric)).toBe(401)
  })

  test('a token with a revoked jti is refused even though its identity is not revoked and its iat is after every issued-before', async () => {
    const t = rawToken(`{${base('max')},"iat":${nowS()},"jti":"max-leaked"}`)
    await h.gateway.revocations.revoke({
      kind: 'issued_before',
      identity: 'max',
      tenant: 'acme',
      issuedBefore: new Date((nowS() - 3600) * 1000),
      until: null,
    })
    expect(await status(h, t)).toBe(200)
    await h.gateway.revocations.revoke({ kind: 'jti', jti: 'max-leaked', until: null })
    expect(await status(h, t)).toBe(401)
  })
})

describe('odd jti values: matched byte for byte, or refused with a way out', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({ mode: 'stateless-json', config: { auth: JWT } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('a jti in NFD is not revoked by its NFC spelling (exact, as documented), and is by its own', async () => {
    const nfd = 'jose\u0301-1'
    const t = rawToken(`{${base('ned')},"iat":${nowS()},"jti":${JSON.stringify(nfd)}}`)
    await h.gateway.revocations.revoke({ kind: 'jti', jti: nfd.normalize('NFC'), until: null })
    expect(await status(h, t)).toBe(200)
    await h.gateway.revocations.revoke({ kind: 'jti', jti: nfd, until: null })
    expect(await status(h, t)).toBe(401)
  })

  test('a token whose jti is 300 bytes or has a space at its end cannot be revoked by jti (400), but issued-before reaches it', async () => {
    const long = 'j'.repeat(300)
    const spaced = 'ola-1 '
    const tLong = rawToken(`{${base('ola')},"iat":${nowS() - 10},"jti":"${long}"}`)
    const tSpaced = rawToken(`{${base('ola')},"iat":${nowS() - 10},"jti":"${spaced}"}`)
    expect(await status(h, tLong)).toBe(200)
    expect(await status(h, tSpaced)).toBe(200)
    await expect(h.gateway.revocations.revoke({ kind: 'jti', jti: long, until: null })).rejects.toThrow(/longer than 256 bytes/)
    await expect(h.gateway.revocations.revoke({ kind: 'jti', jti: spaced, until: null })).rejects.toThrow(/whitespace/)
    await h.gateway.revocations.revoke({ kind: 'issued_before', identity: 'ola', tenant: 'acme', issuedBefore: new Date(), until: null })
    expect(await status(h, tLong)).toBe(401)
    expect(await status(h, tSpaced)).toBe(401)
  })

  test('a jti given as an array or an object is no token id: the token works until its identity is revoked', async () => {
    const arr = rawToken(`{${base('pia')},"iat":${nowS()},"jti":["pia-1"]}`)
    const obj = rawToken(`{${base('pia')},"iat":${nowS()},"jti":{"toString":"pia-1"}}`)
    await h.gateway.revocations.revoke({ kind: 'jti', jti: 'pia-1', until: null })
    expect(await status(h, arr)).toBe(200)
    expect(await status(h, obj)).toBe(200)
    await h.gateway.revocations.revoke({ identity: 'pia', tenant: 'acme', until: null })
    expect(await status(h, arr)).toBe(401)
    expect(await status(h, obj)).toBe(401)
  })
})

describe('a token pasted where a jti belongs is refused, so it never lands in the list or the audit trail', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      mode: 'stateless-json',
      config: { auth: JWT, admin: { listen: '127.0.0.1:0', token: '${ADMIN_TOKEN}' } },
      env: { ADMIN_TOKEN },
    })
  })
  afterAll(async () => {
    await h.close()
  })

  test('revoke({kind: jti, jti: <a whole compact JWT under 256 bytes>}) is an input error', async () => {
    const token = await hs({ sub: 'a', exp: hour() })
    expect(Buffer.byteLength(token)).toBeLessThan(256)
    await expect(h.gateway.revocations.revoke({ kind: 'jti', jti: token, until: null })).rejects.toBeInstanceOf(RevocationInputError)
    expect(await h.gateway.revocations.list()).toEqual([])
  })

  test('through the admin API, POST {jti: <token>} and DELETE ?jti=<token> get 400 and the admin audit entry does not hold the token', async () => {
    const token = await hs({ sub: 'b', exp: hour() })
    const admin = h.gateway.adminUrl as string
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
    const posted = await fetch(`${admin}/revocations`, { method: 'POST', headers, body: JSON.stringify({ jti: token }) })
    expect(posted.status).toBe(400)
    expect(JSON.stringify(await posted.json())).not.toContain(token)
    const deleted = await fetch(`${admin}/revocations?jti=${token}`, { method: 'DELETE', headers })
    expect(deleted.status).toBe(400)
    expect(JSON.stringify(await deleted.json())).not.toContain(token)
    const trail = JSON.stringify(await h.audit())
    expect(trail).not.toContain(token.split('.')[2])
  })

  test('a reason holding the token ("leaked: <token>") is refused, so the note cannot carry it into the list or the trail', async () => {
    const token = await hs({ sub: 'c', tenant: 'acme', exp: hour() })
    await expect(
      h.gateway.revocations.revoke({ identity: 'c', tenant: 'acme', until: null, reason: `leaked in ticket 42: ${token} (rotated)` }),
    ).rejects.toBeInstanceOf(RevocationInputError)
    const admin = h.gateway.adminUrl as string
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
    const body = JSON.stringify({ identity: 'c', tenant: 'acme', reason: `pasted ${token}` })
    const res = await fetch(`${admin}/revocations`, { method: 'POST', headers, body })
    expect(res.status).toBe(400)
    expect(JSON.stringify(await res.json())).not.toContain(token)
    expect(await h.gateway.revocations.list()).toEqual([])
    expect(JSON.stringify(await h.audit())).not.toContain(token.split('.')[2])
  })

  test('a token pasted as the identity or tenant (POST and DELETE) is refused too, and its refusal is audited without it', async () => {
    const token = await hs({ sub: 'd', exp: hour() })
    await expect(h.gateway.revocations.revoke({ identity: token, tenant: 'acme', until: null })).rejects.toThrow(/whole token/)
    const admin = h.gateway.adminUrl as string
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
    const posted = await fetch(`${admin}/revocations`, { method: 'POST', headers, body: JSON.stringify({ identity: 'd', tenant: token }) })
    expect(posted.status).toBe(400)
    await posted.arrayBuffer()
    const deleted = await fetch(`${admin}/revocations?identity=${token}&tenant=acme`, { method: 'DELETE', headers })
    expect(deleted.status).toBe(400)
    await deleted.arrayBuffer()
    expect(await h.gateway.revocations.list()).toEqual([])
    expect(JSON.stringify(await h.audit())).not.toContain(token.split('.')[2])
  })
})
