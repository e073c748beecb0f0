/**
 * Every audit entry says why it has its decision as a stable code (`reason_code`, docs/gateway.md
 * "Reason codes"), beside the free-text reason; an ordinary allow has none. One real gateway in front
 * of the example server, each request made to hit one refusal or failure.
 */
import { readFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { join } from 'node:path'
import { NOTE, REASON_CODES, type Reasoned, addNote, hasNote, setCause } from '../../src/pipeline/reason'
import { type Harness, MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'
import { closedPort } from '../e2e/raw-upstream'
import { waitFor } from '../helpers/wait'

describe('reason codes in the audit trail', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      mode: 'stateless-json',
      config: {
        features: { budget_enforcement: true },
        max_body_bytes: 2048,
        allowed_origins: ['https://app.example'],
        policy: { default: 'allow', rules: [{ identity: '*', tool: 'secret_admin', effect: 'deny' }] },
        budget: { requests_per_window: 100, window_seconds: 60, repeat_limit: { calls: 1, window_seconds: 60 } },
      },
    })
  })
  afterAll(() => h.close())

  /** Sends one request and returns the reason_code (or null) of the entry it wrote. */
  async function codeOf(init: { method?: string; path?: string; headers?: Record<string, string>; body?: string }): Promise<string | null> {
    const res = await fetch(`${h.url}${init.path ?? '/mcp'}`, {
      method: init.method ?? 'POST',
      headers: init.headers ?? { ...as('alice'), ...MCP_HEADERS },
      body: init.body,
    })
    await res.text()
    const id = res.headers.get('x-wardline-request-id')
    const entry = (await h.audit()).find((e) => e.request_id === id)
    expect(entry).toBeDefined()
    return entry?.reason_code ?? null
  }

  const call = (name: string, args: Record<string, unknown> = {}): string => JSON.stringify(toolCall(name, args))

  test('an allowed call has none; each refusal has its own', async () => {
    expect(await codeOf({ body: call('echo', { message: 'once' }) })).toBeNull()
    expect(await codeOf({ body: call('echo', { message: 'once' }) })).toBe('budget.repeat')
    expect(await codeOf({ body: call('secret_admin') })).toBe('policy.denied')
    expect(await codeOf({ headers: MCP_HEADERS, body: call('echo') })).toBe('auth.missing_token')
    expect(await codeOf({ headers: { ...as('alice'), ...MCP_HEADERS, origin: 'https://evil.example' }, body: call('echo') })).toBe(
      'http.origin',
    )
    expect(await codeOf({ method: 'PUT', body: call('echo') })).toBe('http.method')
    expect(await codeOf({ body: '{broken' })).toBe('jsonrpc.invalid')
    expect(await codeOf({ body: call('echo', { message: 'x'.repeat(4096) }) })).toBe('body.too_large')
    expect(await codeOf({ headers: { ...as('alice'), ...MCP_HEADERS, 'content-encoding': 'gzip' }, body: call('echo') })).toBe(
      'body.encoding',
    )
  })

  test('a client that leaves before the answer: client.closed', async () => {
    const seen = h.upstream.seen.length
    const abort = new AbortController()
    const left = fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...as('alice'), ...MCP_HEADERS },
      body: call('count_slowly', { n: 1, delay_ms: 5000 }),
      signal: abort.signal,
    }).catch(() => null)
    await waitFor(() => h.upstream.seen.length > seen, { what: 'the call to reach the upstream' })
    abort.abort()
    await left
    await waitFor(async () => (await h.audit()).some((e) => e.tool === 'count_slowly'), { what: 'the call to be audited' })
    expect((await h.audit()).find((e) => e.tool === 'count_slowly')).toMatchObject({
      status: 499,
      reason_code: 'client.closed',
      reason: 'client closed the connection',
    })
  })

  test('a request path with a dot segment: http.path', async () => {
    // Sent as written: a URL string would have its dot segment resolved before sending.
    const id = await new Promise<string>((resolve, reject) => {
      const { hostname, port } = new URL(h.url)
      const headers = { ...as('alice'), ...MCP_HEADERS }
      const req = httpRequest({ hostname, port, path: '/mcp/../admin', method: 'POST', headers }, (res) => {
        res.resume()
        res.on('end', () => resolve(String(res.headers['x-wardline-request-id'])))
      })
      req.on('error', reject)
      req.end(call('echo'))
    })
    expect((await h.audit()).find((e) => e.request_id === id)?.reason_code).toBe('http.path')
  })
})

describe('upstream failures', () => {
  test('an upstream nobody listens on: upstream.unreachable, with the WL code leading the reason', async () => {
    const h = await startHarness({ upstreamUrl: `http://127.0.0.1:${await closedPort()}/mcp` })
    try {
      const res = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo')),
      })
      expect(res.status).toBe(502)
      await res.text()
      const [entry] = await h.audit()
      expect(entry).toMatchObject({ decision: 'error', status: 502, reason_code: 'upstream.unreachable' })
      expect(entry.reason).toMatch(/^WL_UPSTREAM_UNREACHABLE: /)
    } finally {
      await h.close()
    }
  })
})

test('docs/gateway.md lists every reason code, once, in the order of pipeline/reason.ts', () => {
  const docs = readFileSync(join(__dirname, '..', '..', 'docs', 'gateway.md'), 'utf8')
  const section = docs.slice(docs.indexOf('### Reason codes'), docs.indexOf('## Performance'))
  const listed = [...section.matchAll(/^\| `([a-z_.]+)` \|/gm)].map((m) => m[1])
  expect(listed).toEqual([...REASON_CODES])
})

describe('reasons are only ever added to', () => {
  const fresh = (): Reasoned => ({ reason: '', reasonCode: null, noteKinds: 0 })

  test('notes append in order; a cause leads when asked, else follows; no earlier text is lost', () => {
    const on = fresh()
    addNote(on, NOTE.budgetFailOpen, 'budget check failed open: down')
    expect(on).toEqual({ reason: 'budget check failed open: down', reasonCode: null, noteKinds: NOTE.budgetFailOpen })
    setCause(on, 'upstream.failed', 'upstream response broke off: reset', true)
    addNote(on, NOTE.budgetRefunded, 'budget refunded: never sent')
    expect(on.reason).toBe('upstream response broke off: reset; budget check failed open: down; budget refunded: never sent')
    expect(on.reasonCode).toBe('upstream.failed')
    setCause(on, 'internal', 'WL_INTERNAL: boom', true)
    expect(on.reasonCode).toBe('internal') // the latest cause's code
    expect(on.reason.startsWith('WL_INTERNAL: boom; upstream response broke off')).toBe(true)
  })

  test('what was noted is asked by its kind, never by its text', () => {
    const on = fresh()
    addNote(on, NOTE.listFiltered, 'completion filtered by policy: worded like another kind')
    expect(hasNote(on, NOTE.listFiltered)).toBe(true)
    expect(hasNote(on, NOTE.completionFiltered)).toBe(false)
  })
})
