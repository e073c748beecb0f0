// Red team: the admin API and the revocation stage, attacked through a real
// gateway (header auth, memory budgets and revocations) in front of the example MCP server.
import { type Socket, connect } from 'node:net'
import type { AuditEntry } from '../../src/audit/entry'
import { MCP_HEADERS, type Harness, as, rpc, startHarness, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const TOKEN = 'redteam-admin-token-0123456789abcdef-XYZ'

let h: Harness
let admin: string

beforeAll(async () => {
  h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { budget_enforcement: true },
      budget: {
        requests_per_window: 50,
        window_seconds: 60,
        tenants: { acme: { requests_per_window: 1000, window_seconds: 60 } },
        repeat_limit: { calls: 100, window_seconds: 60 },
      },
      admin: { listen: '127.0.0.1:0', token: '${ADMIN_TOKEN}' },
    },
    env: { ADMIN_TOKEN: TOKEN },
  })
  admin = h.gateway.adminUrl as string
})
afterAll(() => h.close())

async function adminCall(method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${admin}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

async function post(identity: string, tenant: string, payload: unknown, path = '/mcp'): Promise<Response> {
  return fetch(`${h.url}${path}`, { method: 'POST', headers: { ...MCP_HEADERS, ...as(identity, tenant) }, body: JSON.stringify(payload) })
}

/** A tools/call with the identity header sent as raw UTF-8 bytes, written on the socket as they are. */
function postUtf8(identity: string, tenant: string): Promise<number> {
  const url = new URL(h.url)
  const body = JSON.stringify(toolCall('echo', { text: 'x' }))
  const head =
    `POST /mcp HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
    `X-Wardline-Identity: ${identity}\r\nX-Wardline-Tenant: ${tenant}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`
  return new Promise((resolve, reject) => {
    let text = ''
    const s = connect(Number(url.port), url.hostname, () => s.write(Buffer.from(head + body, 'utf8')))
    s.on('data', (c: Buffer) => (text += c.toString('latin1')))
    s.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0)))
    s.on('error', reject)
  })
}

async function adminEntries(): Promise<AuditEntry[]> {
  return (await h.audit()).filter((e) => e.method.startsWith('admin/'))
}

type Bucket = { kind: string; name: string; tenant?: string; used: number; call?: string }

describe('revocation: until', () => {
  test.each(['2027-02-31T00:00:00Z', '2027-04-31T12:00:00Z', '2027-02-29T00:00:00Z', '2027-06-00T00:00:00Z'])(
    'a day the month does not have (%s) is refused, not rolled over into the next month',
    async (until) => {
      // Date.parse reads 2027-02-31 as 2027-03-03: taken as it parses, it would be stored as March 3 with 201.
      const r = await adminCall('POST', '/revocations', { identity: 'feb', tenant: 'acme', until })
      expect(r.status).toBe(400)
      expect(r.body.error).toBe('until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null')
      expect(((await adminCall('GET', '/revocations')).body.revocations as unknown[]).length).toBe(0)
    },
  )

  test('a leap day, a far-future end and an offset are taken as written', async () => {
    for (const [until, stored] of [
      ['2028-02-29T00:00:00Z', '2028-02-29T00:00:00.000Z'],
      ['9999-12-31T23:59:59Z', '9999-12-31T23:59:59.000Z'],
      ['2030-01-01T01:00:00+02:00', '2029-12-31T23:00:00.000Z'],
    ]) {
      const r = await adminCall('POST', '/revocations', { identity: 'far', tenant: 'acme', until })
      expect(r.status).toBe(201)
      expect((r.body.revocation as { until: string }).until).toBe(stored)
      expect((await post('far', 'acme', toolCall('echo', { text: 'x' }))).status).toBe(401)
    }
    expect((await adminCall('DELETE', '/revocations?identity=far&tenant=acme')).status).toBe(200)
    expect((await post('far', 'acme', toolCall('echo', { text: 'x' }))).status).toBe(200)
  })
})

describe('revocation: every path to the upstream', () => {
  beforeAll(async () => {
    expect((await adminCall('POST', '/revocations', { identity: 'mallory', tenant: 'acme' })).status).toBe(201)
  })
  afterAll(async () => {
    await adminCall('DELETE', '/revocations?identity=mallory&tenant=acme')
  })

  test.each([
    ['a batch', 'POST', '/mcp', [toolCall('echo', { text: 'a' }, 1), toolCall('echo', { text: 'b' }, 2)]],
    [
      'an initialize',
      'POST',
      '/mcp',
      rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } }),
    ],
    ['a notification', 'POST', '/mcp', { jsonrpc: '2.0', method: 'notifications/initialized' }],
    ['a GET stream', 'GET', '/mcp', undefined],
    ['a session DELETE', 'DELETE', '/mcp', undefined],
    ['the legacy /sse stream', 'GET', '/sse', undefined],
    ['a legacy /messages POST', 'POST', '/messages?sessionId=abc', toolCall('echo', { text: 'c' })],
    ['a body that is not JSON', 'POST', '/mcp', '{not json'],
  ])('%s from a revoked identity gets 401 revoked', async (_name, method, path, body) => {
    const res = await fetch(`${h.url}${path}`, {
      method,
      headers: { ...MCP_HEADERS, ...as('mallory', 'acme'), 'mcp-session-id': 'x' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    })
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toContain('error_description="revoked"')
    await res.text()
  })

  test('the same name in another tenant, in another case, or in another Unicode form is another caller', async () => {
    // Matching is exact, as budgets and policy match principals: none of these is mallory of acme.
    for (const [identity, tenant] of [
      ['mallory', 'globex'],
      ['Mallory', 'acme'],
      ['mallory', 'ACME'],
    ]) {
      expect((await post(identity, tenant, toolCall('echo', { text: 'x' }))).status).toBe(200)
    }
  })

  test('a revocation in tenant default reaches a caller that sends no tenant, or an empty one', async () => {
    expect((await adminCall('POST', '/revocations', { identity: 'notenant' })).status).toBe(201)
    const send = (headers: Record<string, string>): Promise<Response> =>
      fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...headers },
        body: JSON.stringify(toolCall('echo', { text: 'x' })),
      })
    const none = await send({ 'x-wardline-identity': 'notenant' })
    expect(none.status).toBe(401)
    expect(none.headers.get('www-authenticate')).toContain('revoked')
    // An empty tenant header must not read as a tenant nobody revoked: refused either way, never forwarded.
    expect((await send({ 'x-wardline-identity': 'notenant', 'x-wardline-tenant': '' })).status).toBe(401)
    expect((await send({ 'x-wardline-identity': 'notenant', 'x-wardline-tenant': 'default' })).status).toBe(401)
    expect((await adminCall('DELETE', '/revocations?identity=notenant')).status).toBe(200)
    expect((await send({ 'x-wardline-identity': 'notenant' })).status).toBe(200)
  })

  test('revoking an NFC identity does not reach its NFD spelling (documented: exact match), and each is revocable', async () => {
    const nfc = 'jos\u00e9'
    const nfd = 'jose\u0301'
    expect((await adminCall('POST', '/revocations', { identity: nfc, tenant: 'acme' })).status).toBe(201)
    expect(await postUtf8(nfc, 'acme')).toBe(401)
    expect(await postUtf8(nfd, 'acme')).toBe(200)
    expect((await adminCall('DELETE', `/revocations?identity=${encodeURIComponent(nfc)}&tenant=acme`)).status).toBe(200)
  })
})

describe('budget reset: keys with JSON specials select only their own buckets', () => {
  test('identity a vs a" vs a",": a reset of one leaves the others (identity and repeat buckets)', async () => {
    const names = ['a', 'a"', 'a","', 'a\\']
    for (const n of names) for (let i = 0; i < 2; i++) expect((await post(n, 'acme', toolCall('echo', { text: `t${i}` }))).status).toBe(200)
    const before = async (n: string): Promise<Bucket[]> =>
      (await adminCall('GET', `/budgets?identity=${encodeURIComponent(n)}&tenant=acme`)).body.buckets as Bucket[]
    for (const n of names) {
      const b = await before(n)
      expect(b.filter((x) => x.kind === 'identity').map((x) => [x.name, x.used])).toEqual([[n, 2]])
      expect(b.filter((x) => x.kind === 'repeat').map((x) => [x.name, x.used])).toEqual([
        [n, 1],
        [n, 1],
      ])
    }
    const r = await adminCall('DELETE', '/budgets?identity=a&tenant=acme&kind=repeat')
    expect((r.body.reset as Bucket[]).map((b) => [b.kind, b.name])).toEqual([
      ['repeat', 'a'],
      ['repeat', 'a'],
    ])
    const r2 = await adminCall('DELETE', '/budgets?identity=a&tenant=acme&kind=identity')
    expect((r2.body.reset as Bucket[]).map((b) => [b.kind, b.name, b.used])).toEqual([['identity', 'a', 2]])
    for (const n of names.slice(1)) {
      const b = await before(n)
      expect(b.filter((x) => x.kind !== 'tenant').map((x) => x.used)).toEqual([2, 1, 1])
    }
  })

  test('tenant names with JSON specials: a reset in acme leaves the same identity of ac"me alone', async () => {
    expect((await post('zed', 'ac"me', toolCall('echo', { text: 'x' }))).status).toBe(200)
    expect((await post('zed', 'acme', toolCall('echo', { text: 'x' }))).status).toBe(200)
    await adminCall('DELETE', '/budgets?identity=zed&tenant=acme&kind=identity')
    const other = (await adminCall('GET', `/budgets?identity=zed&tenant=${encodeURIComponent('ac"me')}&kind=identity`)).body
      .buckets as Bucket[]
    expect(other.map((b) => [b.name, b.tenant, b.used])).toEqual([['zed', 'ac"me', 1]])
  })
})

// Also the case of a few slow clients: the same two calls are asserted with the crowd in place.
describe('a crowd on the admin port', () => {
  test('300 idle connections, 100 trickling headers and 200 unauthenticated calls: both listeners still answer', async () => {
    const url = new URL(admin)
    const open = (): Promise<Socket> =>
      new Promise((resolve, reject) => {
        const s = connect(Number(url.port), url.hostname, () => resolve(s))
        s.on('error', () => undefined)
        s.once('error', reject)
      })
    const sockets: Socket[] = []
    try {
      for (let i = 0; i < 300; i++) sockets.push(await open())
      for (let i = 0; i < 100; i++) {
        const s = await open()
        s.write(`DELETE /budgets?identity=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN.slice(0, 10)}`)
        sockets.push(s)
      }
      const flood = Array.from({ length: 200 }, () => fetch(`${admin}/budgets`).then((r) => r.status))
      expect((await post('crowd', 'acme', toolCall('echo', { text: 'x' }))).status).toBe(200)
      expect((await adminCall('GET', '/budgets?identity=crowd&tenant=acme&kind=identity')).status).toBe(200)
      expect(new Set(await Promise.all(flood))).toEqual(new Set([401]))
    } finally {
      for (const s of sockets) s.destroy()
    }
  })
})

describe('names that are also Object.prototype keys', () => {
  test.each(['constructor', '__proto__', 'toString', 'hasOwnProperty'])(
    'tenant and tool %s read as unconfigured, not as a crash',
    async (name) => {
      const r = await adminCall('GET', `/budgets?tenant=${name}&tool=${name}`)
      expect(r.status).toBe(200)
      expect(r.body.buckets).toEqual([])
      expect(r.body.notes).toEqual([
        `tenant ${JSON.stringify(name)} has no bucket of its own (it is not under budget.tenants)`,
        `tool ${JSON.stringify(name)} has no bucket of its own (it is not under budget.tools with limits)`,
      ])
      expect((await adminCall('POST', '/revocations', { identity: name, tenant: name })).status).toBe(201)
      expect((await post(name, name, toolCall('echo', { text: 'x' }))).status).toBe(401)
      expect((await post('someone', name, toolCall('echo', { text: 'x' }))).status).toBe(200)
      expect((await adminCall('DELETE', `/revocations?identity=${name}&tenant=${name}`)).status).toBe(200)
    },
  )

  test.each(['constructor', '__proto__', 'toString'])('a request path %s is an unknown route (404), whatever the method', async (name) => {
    const url = new URL(admin)
    const answer = await new Promise<string>((resolve, reject) => {
      const s = connect(Number(url.port), url.hostname, () =>
        s.write(`GET /${name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\n\r\n`),
      )
      let text = ''
      s.on('data', (c: Buffer) => (text += c.toString()))
      s.on('close', () => resolve(text))
      s.on('error', reject)
    })
    expect(answer).toMatch(/^HTTP\/1\.1 404/)
  })
})

describe('the audit trail names exactly what was acted on', () => {
  test('an identity holding " tenant=" cannot pass for another caller in the target', async () => {
    // Written as plain "identity=x tenant=acme tenant=…" text, the targets of both revocations below
    // would read as the other one.
    expect((await adminCall('POST', '/revocations', { identity: 'x tenant=acme', tenant: 'default' })).status).toBe(201)
    expect((await adminCall('POST', '/revocations', { identity: 'x', tenant: 'acme' })).status).toBe(201)
    await adminCall('DELETE', `/revocations?identity=${encodeURIComponent('x tenant=acme')}&tenant=default`)
    await adminCall('DELETE', '/revocations?identity=x&tenant=acme')
    await adminCall('GET', `/budgets?identity=${encodeURIComponent('x tenant=acme')}&kind=identity`)
    const targets = (await adminEntries()).filter((e) => e.tool.includes('x')).map((e) => [e.method, e.tool])
    expect(targets).toEqual(
      expect.arrayContaining([
        ['admin/revocations.create', 'identity="x tenant=acme" tenant=default'],
        ['admin/revocations.create', 'identity=x tenant=acme'],
        ['admin/revocations.remove', 'identity="x tenant=acme" tenant=default'],
        ['admin/revocations.remove', 'identity=x tenant=acme'],
        ['admin/budgets.get', 'identity="x tenant=acme" kind=identity'],
      ]),
    )
  })
})

describe('admin calls that never complete are still audited', () => {
  test('a connection dropped in the middle of a POST body: one entry, nothing revoked', async () => {
    const url = new URL(admin)
    const before = (await adminEntries()).length
    await new Promise<void>((resolve, reject) => {
      const s = connect(Number(url.port), url.hostname, () => {
        s.write(
          `POST /revocations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"identity":"half`,
        )
        // The client's own pace, the scenario: part of the body goes out, then the client vanishes.
        setTimeout(() => {
          s.destroy()
          resolve()
        }, 100)
      })
      s.on('error', reject)
    })
    await waitFor(async () => (await adminEntries()).length > before, { what: 'the admin entry of the dropped call' })
    const entries = (await adminEntries()).slice(before)
    expect(entries).toHaveLength(1)
    expect(entries[0]).toEqual(expect.objectContaining({ method: 'admin/revocations.create', identity: 'admin', decision: 'error' }))
    expect(JSON.stringify(entries)).not.toContain(TOKEN)
    expect((await adminCall('GET', '/revocations')).body.revocations).toEqual([])
  })

  test('a request line the parser refuses gets 400 from Node and no route runs', async () => {
    const url = new URL(admin)
    const answer = await new Promise<string>((resolve, reject) => {
      const s = connect(Number(url.port), url.hostname, () =>
        s.write(
          `DELETE /budgets?identity=a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
        ),
      )
      let text = ''
      s.on('data', (c: Buffer) => (text += c.toString()))
      s.on('close', () => resolve(text))
      s.on('error', reject)
    })
    expect(answer).toMatch(/^HTTP\/1\.1 400/)
  })
})
