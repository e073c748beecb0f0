import { request } from 'node:http'
import type { AuditEntry } from '../../src/audit/entry'
import { hs } from '../auth/forge'
import { MCP_HEADERS, type Harness, as, startHarness, toolCall } from '../helpers/harness'

const TOKEN = 'admin-token-for-tests-0123456789abcdef-XYZ'
const BUDGET = {
  requests_per_window: 3,
  window_seconds: 60,
  tenants: { acme: { requests_per_window: 100, window_seconds: 60 } },
  tools: { echo: { requests_per_window: 100, window_seconds: 60 } },
}

let h: Harness
let admin: string

beforeAll(async () => {
  h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { budget_enforcement: true },
      budget: BUDGET,
      admin: { listen: '127.0.0.1:0', token: '${ADMIN_TOKEN}' },
    },
    env: { ADMIN_TOKEN: TOKEN },
  })
  admin = h.gateway.adminUrl as string
})
afterAll(() => h.close())

async function call(identity: string, tenant = 'acme'): Promise<Response> {
  return fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity, tenant) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' })),
  })
}

async function adminCall(
  method: string,
  path: string,
  init: { token?: string | null; body?: string; headers?: Record<string, string> } = {},
) {
  const token = init.token === undefined ? TOKEN : init.token
  const res = await fetch(`${admin}${path}`, {
    method,
    headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...init.headers },
    body: init.body,
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> }
}

/** Raw HTTP, so a path reaches the server exactly as written (fetch would normalise `..`). */
function raw(method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const url = new URL(admin)
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method, path, headers }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => (body += c.toString()))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function adminEntries(): Promise<AuditEntry[]> {
  return (await h.audit()).filter((e) => e.method.startsWith('admin/'))
}

type Bucket = {
  kind: string
  name: string
  limit: number
  used: number
  remaining: number
  reset_seconds: number | null
  reset_at: string | null
}

describe('GET and DELETE /budgets (memory store)', () => {
  test('GET shows every bucket that applies, with the counts of the calls made', async () => {
    expect((await call('alice')).status).toBe(200)
    expect((await call('alice')).status).toBe(200)
    const r = await adminCall('GET', '/budgets?identity=alice&tenant=acme&tool=echo')
    expect(r.status).toBe(200)
    expect(r.body.scope).toBe('this replica')
    const buckets = r.body.buckets as Bucket[]
    expect(buckets.map((b) => [b.kind, b.name, b.limit, b.used, b.remaining])).toEqual([
      ['identity', 'alice', 3, 2, 1],
      ['tenant', 'acme', 100, 2, 98],
      ['tool', 'echo', 100, 2, 98],
    ])
    for (const b of buckets) {
      expect(b.reset_seconds).toBeGreaterThan(0)
      expect(b.reset_seconds).toBeLessThanOrEqual(60)
      expect(Date.parse(b.reset_at as string)).toBeGreaterThan(Date.now())
    }
  })

  test('an identity nobody has seen reads as 0 used with no open window', async () => {
    const r = await adminCall('GET', '/budgets?identity=nobody&tenant=acme&kind=identity')
    expect(r.body.buckets).toEqual([
      expect.objectContaining({ kind: 'identity', name: 'nobody', used: 0, remaining: 3, reset_seconds: null, reset_at: null }),
    ])
  })

  test('DELETE with an identity and no kind resets that caller only: its tenant bucket is kept, and a reset of the tenant alone clears it', async () => {
    expect((await call('carol')).status).toBe(200)
    expect((await call('carol')).status).toBe(200)
    const tenantUsed = (): Promise<number> =>
      adminCall('GET', '/budgets?tenant=acme').then((r) => (r.body.buckets as Bucket[]).find((b) => b.kind === 'tenant')?.used ?? -1)
    const before = await tenantUsed()
    expect(before).toBeGreaterThanOrEqual(2)
    const r = await adminCall('DELETE', '/budgets?identity=carol&tenant=acme')
    expect(r.status).toBe(200)
    expect((r.body.reset as Bucket[]).map((b) => [b.kind, b.name, b.used])).toEqual([['identity', 'carol', 2]])
    expect(r.body.notes).toEqual(expect.arrayContaining([expect.stringContaining('"acme"\'s shared bucket is kept')]))
    expect(await tenantUsed()).toBe(before)
    const t = await adminCall('DELETE', '/budgets?tenant=acme')
    expect((t.body.reset as Bucket[]).map((b) => [b.kind, b.name, b.used])).toEqual([['tenant', 'acme', before]])
    expect(await tenantUsed()).toBe(0)
  })

  test('DELETE resets exactly the selected buckets, and the next call is admitted', async () => {
    expect((await call('bob')).status).toBe(200)
    expect((await call('bob')).status).toBe(200)
    expect((await call('bob')).status).toBe(200)
    expect((await call('bob')).status).toBe(429)
    const counts = (buckets: Bucket[]): unknown[] => buckets.map((b) => [b.kind, b.name, b.used])
    const before = counts((await adminCall('GET', '/budgets?tenant=acme')).body.buckets as Bucket[])
    const r = await adminCall('DELETE', '/budgets?identity=bob&tenant=acme&kind=identity')
    expect(r.status).toBe(200)
    expect(r.body.reset).toEqual([expect.objectContaining({ kind: 'identity', name: 'bob', used: 3 })])
    // The tenant bucket was not asked for: it keeps its count.
    expect(counts((await adminCall('GET', '/budgets?tenant=acme')).body.buckets as Bucket[])).toEqual(before)
    expect((await call('bob')).status).toBe(200)
    const after = (await adminCall('GET', '/budgets?identity=bob&tenant=acme&kind=identity')).body.buckets as Bucket[]
    expect(after[0].used).toBe(1)
  })

  test('a DELETE without any filter is refused and resets nothing', async () => {
    const used = async (): Promise<number[]> => ((await adminCall('GET', '/budgets')).body.buckets as Bucket[]).map((b) => b.used)
    const before = await used()
    expect(before.some((n) => n > 0)).toBe(true)
    const r = await adminCall('DELETE', '/budgets')
    expect(r.status).toBe(400)
    expect(r.body.error).toMatch(/name the buckets to reset with identity, tenant, tool or server/)
    expect(await used()).toEqual(before)
  })

  test('a tenant or tool without a bucket of its own is named in a note', async () => {
    const r = await adminCall('GET', '/budgets?tenant=globex&tool=other')
    expect(r.body.buckets).toEqual([])
    expect(r.body.notes).toEqual([
      'tenant "globex" has no bucket of its own (it is not under budget.tenants)',
      'tool "other" has no bucket of its own (it is not under budget.tools with limits)',
    ])
  })

  test.each([
    ['/budgets?user=alice', 'unknown query parameter "user" (allowed: identity, tenant, tool, server, kind)'],
    ['/budgets?identity=a&identity=b', 'query parameter identity is given more than once'],
    ['/budgets?identity=', 'identity is empty'],
    ['/budgets?identity=%00x', 'identity contains control characters'],
    ['/budgets?kind=everything', 'kind must be one of identity, tenant, tool, server, repeat'],
  ])('GET %s is refused with 400: %s', async (path, message) => {
    const r = await adminCall('GET', path)
    expect(r.status).toBe(400)
    expect(r.body.error).toBe(message)
  })
})

describe('revocations', () => {
  test('POST revokes (401 on the next call), GET lists, DELETE lifts', async () => {
    expect((await call('carol')).status).toBe(200)
    const until = new Date(Date.now() + 3600_000).toISOString()
    const created = await adminCall('POST', '/revocations', {
      body: JSON.stringify({ identity: 'carol', tenant: 'acme', until, reason: 'laptop lost' }),
      headers: { 'content-type': 'application/json' },
    })
    expect(created.status).toBe(201)
    expect(created.body.revocation).toEqual(expect.objectContaining({ identity: 'carol', tenant: 'acme', until, reason: 'laptop lost' }))
    expect((await call('carol')).status).toBe(401)
    const listed = await adminCall('GET', '/revocations')
    expect(listed.body.revocations).toEqual([expect.objectContaining({ identity: 'carol', tenant: 'acme' })])
    expect((await adminCall('DELETE', '/revocations?identity=carol&tenant=acme')).status).toBe(200)
    expect((await call('carol')).status).toBe(200)
    const again = await adminCall('DELETE', '/revocations?identity=carol&tenant=acme')
    expect(again.status).toBe(404)
    expect(again.body.error).toBe('no revocation for identity "carol" in tenant "acme"')
  })

  test.each([
    ['{"identity": "x", "until": "tomorrow"}', 400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'],
    [
      '{"identity": "x", "until": "2020-01-01T00:00:00Z"}',
      400,
      'until (2020-01-01T00:00:00.000Z) is not in the future: the revocation would never apply',
    ],
    ['{"tenant": "acme"}', 400, 'identity (use "*" for every identity of the tenant) or jti is required'],
    ['{"identity": "x", "role": "admin"}', 400, 'unknown field "role" (allowed: identity, tenant, jti, issued_before, until, reason)'],
    ['[1, 2]', 400, 'the body must be a JSON object: {"identity", "tenant"} or {"jti"}, with "issued_before", "until", "reason"'],
    ['{"jti": "j", "identity": "x"}', 400, 'jti names one token: leave out identity'],
    ['{"jti": "j", "issued_before": "2026-01-01T00:00:00Z"}', 400, 'jti names one token: leave out issued_before'],
    ['{"jti": ""}', 400, 'jti is empty'],
    ['{"jti": 12}', 400, 'jti must be a string'],
    ['{"jti": "a\\nb"}', 400, 'jti contains control characters'],
    ['{"identity": "x", "issued_before": "yesterday"}', 400, 'issued_before must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z)'],
    ['{"identity": "x", "issued_before": null}', 400, 'issued_before must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z)'],
    ['{"identity": "x", "issued_before": "2999-01-01T00:00:00Z"}', 400, /^issued_before \(2999-01-01T00:00:00\.000Z\) is in the future/],
    ['{"identity": "x", "issued_before": "0000-01-01T00:00:00Z"}', 400, /^issued_before \(0000-01-01T00:00:00\.000Z\) is not after 1970/],
    ['{"identity": "x",', 400, /^the body is not valid JSON: /],
    ['{"identity": "x", "until": "2030-01-01T00:00:00"}', 400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'], // no zone
    ['{"identity": "x", "until": "2030-01-01"}', 400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'], // a date only
    ['{"identity": "x", "until": 1893456000000}', 400, 'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null'], // a number
    [
      '{"identity": "x", "until": "2030-01-01T25:00:00Z"}',
      400,
      'until must be an ISO 8601 time with a zone (2026-12-01T18:00:00Z) or null',
    ], // an hour 25
    [
      `{"identity": "x", "until": "${new Date(Date.now() - 1000).toISOString()}"}`, // one second ago
      400,
      /^until \(\S+\) is not in the future: the revocation would never apply$/,
    ],
  ])('POST %s is refused with %d', async (body, status, message) => {
    const r = await adminCall('POST', '/revocations', { body, headers: { 'content-type': 'application/json' } })
    expect(r.status).toBe(status)
    expect(r.body.error).toEqual(typeof message === 'string' ? message : expect.stringMatching(message))
    // Nothing stored, and nothing applied: x (tenant default) is not refused as revoked.
    expect((await adminCall('GET', '/revocations')).body.revocations).toEqual([])
    expect((await call('x', 'default')).status).not.toBe(401)
  })

  test('POST {jti} revokes one token, listed with its kind; DELETE ?jti= lifts it; the audit target names the jti', async () => {
    const created = await adminCall('POST', '/revocations', {
      body: JSON.stringify({ jti: 'tok-123', reason: 'leaked' }),
      headers: { 'content-type': 'application/json' },
    })
    expect(created.status).toBe(201)
    expect(created.body.revocation).toEqual({
      kind: 'jti',
      jti: 'tok-123',
      until: null,
      created_at: expect.any(String) as unknown,
      reason: 'leaked',
    })
    expect((await call('carol')).status).toBe(200) // header mode: no token, no jti to match
    expect((await adminCall('GET', '/revocations')).body.revocations).toEqual([created.body.revocation])
    const lifted = await adminCall('DELETE', '/revocations?jti=tok-123')
    expect(lifted).toMatchObject({ status: 200, body: { removed: { kind: 'jti', jti: 'tok-123' } } })
    const again = await adminCall('DELETE', '/revocations?jti=tok-123')
    expect(again).toMatchObject({ status: 404, body: { error: 'no revocation for token jti "tok-123"' } })
    const entries = (await adminEntries()).filter((e) => e.tool === 'jti=tok-123')
    expect(entries.map((e) => [e.method, e.status])).toEqual([
      ['admin/revocations.create', 201],
      ['admin/revocations.remove', 200],
      ['admin/revocations.remove', 404],
    ])
  })

  test("POST {identity, tenant, issued_before} refuses the identity's requests without a token iat (header mode); DELETE with kind=issued_before lifts it", async () => {
    const before = new Date(Date.now() - 60_000).toISOString()
    const created = await adminCall('POST', '/revocations', {
      body: JSON.stringify({ identity: 'dana', tenant: 'acme', issued_before: before }),
      headers: { 'content-type': 'application/json' },
    })
    expect(created.status).toBe(201)
    expect(created.body.revocation).toEqual({
      kind: 'issued_before',
      identity: 'dana',
      tenant: 'acme',
      issued_before: before,
      until: null,
      created_at: expect.any(String) as unknown,
    })
    expect((await call('dana')).status).toBe(401) // no token, no iat: refused (conservative, documented)
    expect((await call('dana', 'globex')).status).toBe(200)
    // The identity kind is another entry: lifting it finds none, and the issued-before one stays.
    expect((await adminCall('DELETE', '/revocations?identity=dana&tenant=acme')).status).toBe(404)
    expect((await call('dana')).status).toBe(401)
    const lifted = await adminCall('DELETE', '/revocations?identity=dana&tenant=acme&kind=issued_before')
    expect(lifted).toMatchObject({ status: 200, body: { removed: { kind: 'issued_before', identity: 'dana', tenant: 'acme' } } })
    expect((await call('dana')).status).toBe(200)
    const entry = (await adminEntries()).find((e) => e.method === 'admin/revocations.create' && e.tool.startsWith('identity=dana'))
    expect(entry).toMatchObject({
      tool: 'identity=dana tenant=acme kind=issued_before',
      reason: `tokens issued before ${before} revoked until removed`,
    })
  })

  test.each([
    ['/revocations?kind=everything&identity=x', 'kind must be identity, issued_before or jti'],
    ['/revocations?jti=a&identity=x', 'jti names one token: leave out identity'],
    ['/revocations?jti=a&kind=issued_before&identity=x', 'jti names a token revocation: leave out kind=issued_before'],
    ['/revocations?kind=jti', 'jti is required with kind=jti'],
    ['/revocations?kind=issued_before', 'identity is required (the revocation to lift; "*" for a tenant-wide one), or jti'],
    ['/revocations?jti=', 'jti is empty'],
    ['/revocations?jti=a&jti=b', 'query parameter jti is given more than once'],
  ])('DELETE %s is refused with 400: %s', async (path, message) => {
    const r = await adminCall('DELETE', path)
    expect(r.status).toBe(400)
    expect(r.body.error).toBe(message)
  })

  test('a body that is not JSON is 415, one over 16 KiB is 413', async () => {
    const form = await adminCall('POST', '/revocations', {
      body: 'identity=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    })
    expect(form.status).toBe(415)
    const big = JSON.stringify({ identity: 'x', reason: 'r'.repeat(20_000) })
    const r = await adminCall('POST', '/revocations', { body: big, headers: { 'content-type': 'application/json' } })
    expect(r.status).toBe(413)
    expect(r.body.error).toBe('the body is larger than 16384 bytes')
  })
})

describe('authentication and routing', () => {
  test.each([
    ['no Authorization header', null, 'Bearer realm="wardline-admin"'],
    ['a wrong token', 'x'.repeat(TOKEN.length), 'Bearer realm="wardline-admin", error="invalid_token"'],
    ['the token without its last character', TOKEN.slice(0, -1), 'Bearer realm="wardline-admin", error="invalid_token"'],
    ['the token with one more character', `${TOKEN}x`, 'Bearer realm="wardline-admin", error="invalid_token"'],
    ['the token in upper case', TOKEN.toUpperCase(), 'Bearer realm="wardline-admin", error="invalid_token"'],
  ])('%s gets 401 with a challenge, and nothing else is revealed', async (_what, token, challenge) => {
    const r = await adminCall('GET', '/budgets?identity=alice', { token })
    expect(r.status).toBe(401)
    expect(r.headers.get('www-authenticate')).toBe(challenge)
    expect(r.body).not.toHaveProperty('buckets')
    // Even an unknown path answers 401 first: the routes are not revealed to a caller without the token.
    expect((await adminCall('GET', '/nothing', { token })).status).toBe(401)
  })

  test('a valid MCP token for the gateway is not an admin token', async () => {
    const jwt = await hs({ sub: 'alice', tenant: 'acme' })
    const r = await adminCall('GET', '/revocations', { token: jwt })
    expect(r.status).toBe(401)
    // Header-mode identities mean nothing here either.
    const headers = await raw('GET', '/revocations', as('alice'))
    expect(headers.status).toBe(401)
  })

  test('the admin token over the gateway listener reaches no admin route', async () => {
    expect((await call('dave')).status).toBe(200)
    for (const [method, path] of [
      ['GET', '/budgets?identity=dave&tenant=acme'],
      ['DELETE', '/budgets?identity=dave&tenant=acme'],
      ['POST', '/revocations'],
    ]) {
      const res = await fetch(`${h.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...as('dave') },
        body: method === 'POST' ? JSON.stringify({ identity: 'dave', tenant: 'acme' }) : undefined,
      })
      expect(res.status).not.toBe(200)
      expect(res.status).not.toBe(201)
      expect(await res.text()).not.toContain('"buckets"')
    }
    // Nothing was reset and nobody was revoked.
    const buckets = (await adminCall('GET', '/budgets?identity=dave&tenant=acme&kind=identity')).body.buckets as Bucket[]
    expect(buckets[0].used).toBe(1)
    expect((await call('dave')).status).toBe(200)
  })

  test.each([
    ['GET', '/budgets/../revocations', 404],
    ['GET', '/%2e%2e/budgets', 404],
    ['GET', '//budgets', 404],
    ['GET', '/Budgets', 404],
    ['GET', 'http://other/budgets', 404],
    ['PATCH', '/budgets', 405],
    ['PUT', '/revocations', 405],
    ['OPTIONS', '/budgets', 405],
  ])('%s %s with the token is %d', async (method, path, status) => {
    const r = await raw(method, path, { authorization: `Bearer ${TOKEN}` })
    expect(r.status).toBe(status)
    expect((JSON.parse(r.body) as { error: unknown }).error).toEqual(expect.any(String))
  })

  test('405 names the methods the path takes', async () => {
    const r = await adminCall('PATCH', '/budgets')
    expect(r.headers.get('allow')).toBe('GET, DELETE')
    expect(r.body.error).toBe('"/budgets" does not take PATCH (allowed: GET, DELETE)')
  })
})

describe('the audit trail', () => {
  test('every admin call writes exactly one entry, refused ones included', async () => {
    const before = (await adminEntries()).length
    await adminCall('GET', '/budgets?identity=erin&tenant=acme', { headers: { 'x-wardline-operator': 'ops-jane' } })
    await adminCall('GET', '/budgets', { token: 'wrong' })
    await adminCall('DELETE', '/budgets')
    await adminCall('PATCH', '/revocations')
    await adminCall('POST', '/revocations', { body: '{', headers: { 'content-type': 'application/json' } })
    const entries = (await adminEntries()).slice(before)
    expect(entries.map((e) => [e.method, e.identity, e.decision, e.status])).toEqual([
      ['admin/budgets.get', 'admin:ops-jane', 'allow', 200],
      ['admin/budgets.get', '', 'unauthorized', 401],
      ['admin/budgets.reset', 'admin', 'error', 400],
      ['admin/unknown', 'admin', 'error', 405],
      ['admin/revocations.create', 'admin', 'error', 400],
    ])
    expect(entries.map((e) => e.reason_code ?? null)).toEqual([
      null,
      'auth.invalid_token',
      'admin.invalid_request',
      'http.method',
      'admin.invalid_request',
    ])
    expect(entries[0].tool).toBe('identity=erin tenant=acme')
    expect(entries[1].reason).toBe('the admin token is not valid')
    expect(entries[2].reason).toMatch(/^name the buckets to reset/)
    for (const e of entries) expect(e.latency_ms).toBeGreaterThanOrEqual(0)
    // The token never lands in the trail.
    expect(JSON.stringify(await h.audit())).not.toContain(TOKEN)
  })

  test('admin calls are not counted as proxied requests', async () => {
    const metrics = async (): Promise<string> => (await fetch(`${h.url}/metrics`)).text()
    const requests = (text: string): number =>
      text
        .split('\n')
        .filter((l) => l.startsWith('wardline_requests_total{'))
        .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0)
    const before = requests(await metrics())
    await adminCall('GET', '/budgets')
    expect(requests(await metrics())).toBe(before)
  })
})
