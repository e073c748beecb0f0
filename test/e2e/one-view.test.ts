import type { AuditEntry } from '../../src/audit/entry'
import { type GoStyleUpstream, goStyleRead, startGoStyleUpstream } from '../helpers/go-style-upstream'
import { type Harness, MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'

/**
 * One view of every request: what the gateway counts, judges and audits is what the upstream runs,
 * whatever decoder and URL parser the upstream uses. The upstream here reads bodies as Go's
 * encoding/json does (case-insensitive keys, last wins) and resolves URIs as the SDK servers do.
 */
let h: Harness
let upstream: GoStyleUpstream

beforeAll(async () => {
  upstream = await startGoStyleUpstream()
  h = await startHarness({
    upstreamUrl: upstream.url,
    config: {
      features: { budget_enforcement: true },
      budget: { requests_per_window: 1000, window_seconds: 60, tools: { expensive_tool: { requests_per_window: 3, window_seconds: 600 } } },
      policy: {
        default: 'allow',
        rules: [
          { identity: '*', tenant: 'guest', tool: 'expensive_tool', effect: 'deny' },
          { identity: '*', tenant: 'guest', tool: 'forbidden_tool', effect: 'deny' },
          { identity: '*', method: 'resources/*', tool: 'file:///public/*', effect: 'allow' },
          { identity: '*', method: 'resources/*', tool: '*', effect: 'deny' },
        ],
      },
    },
  })
})

afterAll(async () => {
  await h.close()
  await upstream.close()
})

async function post(
  body: string | Buffer,
  identity = 'mallory',
  tenant = 'guest',
): Promise<{ status: number; json: unknown; requestId: string }> {
  const res = await fetch(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as(identity, tenant) }, body })
  const text = await res.text()
  return { status: res.status, json: text ? JSON.parse(text) : null, requestId: res.headers.get('x-wardline-request-id') ?? '' }
}

async function entriesOf(requestId: string): Promise<AuditEntry[]> {
  return (await h.audit()).filter((e) => e.request_id === requestId || e.request_id.startsWith(`${requestId}/`))
}

const ATTACKS = [
  '{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"PARAMS":{"name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"paramſ":{"name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"Paramſ":{"name":"expensive_tool"}}',
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"expensive_tool"}}',
]

describe('ambiguous JSON', () => {
  test.each(ATTACKS)('%s is refused with 400 and one audit entry, and the upstream runs nothing', async (body) => {
    // The body is a real attack: a Go-style upstream would run the denied tool.
    expect(goStyleRead(body)).toEqual([{ method: 'tools/call', target: 'expensive_tool' }])
    const before = upstream.executed.length
    const res = await post(body)
    expect(res.status).toBe(400)
    expect(res.json).toMatchObject({ jsonrpc: '2.0', error: { code: -32600, message: 'Invalid Request' } })
    expect(upstream.executed.length).toBe(before)
    const entries = await entriesOf(res.requestId)
    expect(entries).toEqual([expect.objectContaining({ identity: 'mallory', decision: 'error', status: 400 })])
  })

  test('an unambiguous call runs exactly what was judged, audited as what ran', async () => {
    const before = upstream.executed.length
    const res = await post(JSON.stringify(toolCall('echo', { text: 'hi' })))
    expect(res.status).toBe(200)
    expect(upstream.executed.slice(before)).toEqual([{ method: 'tools/call', target: 'echo' }])
    expect(await entriesOf(res.requestId)).toEqual([expect.objectContaining({ method: 'tools/call', tool: 'echo', decision: 'allow' })])
  })

  test('the denied tool stays denied and its budget untouched: a member of another tenant can still use all of it', async () => {
    for (const body of ATTACKS) await post(body)
    for (let i = 0; i < 3; i++) expect((await post(JSON.stringify(toolCall('expensive_tool')), 'alice', 'acme')).status).toBe(200)
  })
})

describe('resource URIs', () => {
  const read = (uri: string): string => JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'resources/read', params: { uri } })

  test.each([
    'file:///public/../private/secret',
    'file:///public/%2e%2e/private/secret',
    'file:///public/%2E%2E/private/secret',
    'file:///public\\..\\private\\secret',
    'file:///public/..%2fprivate/secret',
    'EXAMPLE://secret',
    ' example://secret',
    'example://secret\t',
    'file:///priv%61te/secret',
    'file:////private/secret',
  ])('%j is refused (400) rather than judged raw', async (uri) => {
    const before = upstream.executed.length
    const res = await post(read(uri), 'alice', 'acme')
    expect(res.status).toBe(400)
    expect(res.json).toMatchObject({ id: 9, error: { code: -32600 } })
    expect(upstream.executed.length).toBe(before)
    expect(await entriesOf(res.requestId)).toEqual([expect.objectContaining({ identity: 'alice', decision: 'error', status: 400 })])
  })

  test('a URI in normal form is judged as the upstream resolves it', async () => {
    const before = upstream.executed.length
    expect((await post(read('file:///public/readme.md'), 'alice', 'acme')).status).toBe(200)
    expect((await post(read('file:///private/secret'), 'alice', 'acme')).status).toBe(403)
    expect(upstream.executed.slice(before)).toEqual([{ method: 'resources/read', target: 'file:///public/readme.md' }])
  })
})

describe('size, depth and batch length', () => {
  test('a batch over max_batch_messages is refused with one audit entry; a full one passes', async () => {
    const batch = (n: number): string => JSON.stringify(Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' })))
    const over = await post(batch(101), 'alice', 'acme')
    expect(over.status).toBe(400)
    expect(over.json).toMatchObject({ id: null, error: { code: -32600 } })
    expect(await entriesOf(over.requestId)).toEqual([
      expect.objectContaining({ decision: 'error', status: 400, reason: 'batch has more than 100 messages (max_batch_messages)' }),
    ])
    expect((await post(batch(100), 'alice', 'acme')).status).toBe(200)
  })

  test('a body nested 500,000 deep is refused at once and the gateway keeps serving', async () => {
    const res = await post('['.repeat(500_000) + ']'.repeat(500_000), 'alice', 'acme')
    expect(res.status).toBe(400)
    expect(await entriesOf(res.requestId)).toEqual([
      expect.objectContaining({ status: 400, reason: 'JSON nested deeper than 64 levels (max_json_depth)' }),
    ])
    expect((await post(JSON.stringify(toolCall('echo')), 'alice', 'acme')).status).toBe(200)
  })

  test('a 1.5 MB tool call (413 under the old 1 MiB default) goes through', async () => {
    const before = upstream.executed.length
    const res = await post(JSON.stringify(toolCall('echo', { text: 'x'.repeat(1_500_000) })), 'alice', 'acme')
    expect(res.status).toBe(200)
    expect(upstream.executed.slice(before)).toEqual([{ method: 'tools/call', target: 'echo' }])
  })
})

describe('notifications', () => {
  test('a refused tools/call notification gets its refusal status (not 202) and no body, and is still audited', async () => {
    const res = await fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('mallory', 'guest') },
      body: JSON.stringify({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'forbidden_tool' } }),
    })
    expect(res.status).toBe(403)
    expect(await res.text()).toBe('')
    const entries = await entriesOf(res.headers.get('x-wardline-request-id') ?? '')
    expect(entries).toEqual([expect.objectContaining({ method: 'tools/call', tool: 'forbidden_tool', decision: 'deny', status: 403 })])
  })
})
