/**
 * MCP 2026-07-28 requests end to end: Mcp-Method / Mcp-Name checked against the
 * body, Mcp-Param-* forwarded, and subscriptions/listen streamed past the caps meant for calls. A real
 * gateway in front of a raw upstream that records what it received and holds streams open; the audit
 * trail is read back.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { type Harness, MCP_HEADERS, as, rpc, startHarness, toolCall } from '../helpers/harness'
import { open, send } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, startRawUpstream } from './raw-upstream'

const ACK =
  'data: {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1},"notifications":{"toolsListChanged":true}}}\n\n'
const LIST_CHANGED =
  'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}\n\n'

let upstream: RawUpstream
let h: Harness
/** Streams the upstream holds open (GET streams and subscriptions/listen answers) until the test ends them. */
const held: ServerResponse[] = []
/** Client sides of the streams a test opened, aborted after each test. */
let clients: AbortController

beforeAll(async () => {
  upstream = await startRawUpstream((req, res, seen) => {
    if (req.method === 'GET' || seen.body.includes('"method":"subscriptions/listen"')) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
      res.write(req.method === 'GET' ? ': open\n\n' : ACK)
      held.push(res)
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":7,"result":{}}')
  })
  h = await startHarness({
    upstreamUrl: upstream.url,
    config: {
      max_concurrent_per_identity: 2,
      // One connection for calls: a listen stream on it would leave every later call queued (504).
      upstream_connections: 1,
      upstream_timeout_seconds: 5,
      features: { budget_enforcement: true },
      budget: { requests_per_window: 1, window_seconds: 3600 },
    },
  })
})

beforeEach(() => {
  clients = new AbortController()
})

afterEach(() => {
  clients.abort()
  for (const res of held.splice(0)) res.end()
})

afterAll(async () => {
  await h.close()
  await upstream.close()
})

const CALL_HEADERS = { ...MCP_HEADERS, 'mcp-protocol-version': '2026-07-28' }

function post(identity: string, headers: Record<string, string | string[]>, body: unknown) {
  return send(`${h.url}/mcp`, 'POST', { ...CALL_HEADERS, ...as(identity), ...headers }, JSON.stringify(body))
}

/** Opens a subscriptions/listen stream and resolves on its response head; its body is left to the caller. */
function listen(identity: string): Promise<IncomingMessage> {
  return open(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...CALL_HEADERS, ...as(identity), 'mcp-method': 'subscriptions/listen' },
    body: JSON.stringify(rpc('subscriptions/listen', { notifications: { toolsListChanged: true } }, 1)),
    signal: clients.signal,
  })
}

/** Everything the stream has delivered so far, growing as data arrives. */
function collect(res: IncomingMessage): { text: string } {
  const got = { text: '' }
  res.on('data', (c: Buffer) => (got.text += c.toString('utf8')))
  res.on('error', () => undefined) // aborted by the test at the end
  return got
}

async function entriesFor(requestId: string | string[] | undefined) {
  return (await h.audit()).filter((e) => e.request_id === requestId)
}

describe('Mcp-Method and Mcp-Name', () => {
  test('matching headers, a base64 Mcp-Name and Mcp-Param-* reach the upstream unchanged', async () => {
    const res = await post(
      'ana',
      {
        'mcp-method': 'tools/call',
        'mcp-name': '=?base64?SGVsbG8sIOS4lueVjA==?=',
        'mcp-param-region': 'us-west1',
        'mcp-param-greeting': '=?base64?SGVsbG8sIOS4lueVjA==?=',
      },
      toolCall('Hello, 世界', { region: 'us-west1', greeting: 'Hello, 世界' }, 7),
    )
    expect(res.status).toBe(200)
    expect(upstream.seen.at(-1)?.headers).toMatchObject({
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': '=?base64?SGVsbG8sIOS4lueVjA==?=',
      'mcp-param-region': 'us-west1',
      'mcp-param-greeting': '=?base64?SGVsbG8sIOS4lueVjA==?=',
    })
    const entries = await entriesFor(res.headers['x-wardline-request-id'])
    expect(entries).toEqual([expect.objectContaining({ method: 'tools/call', tool: 'Hello, 世界', decision: 'allow', status: 200 })])
  })

  test('a resource read with its URI in Mcp-Name, and a method that names nothing with Mcp-Method alone, go through', async () => {
    const read = await post(
      'ben',
      { 'mcp-method': 'resources/read', 'mcp-name': 'file:///projects/app/config.json' },
      {
        ...rpc('resources/read', { uri: 'file:///projects/app/config.json' }, 7),
      },
    )
    expect(read.status).toBe(200)
    expect((await post('ben', { 'mcp-method': 'tools/list' }, rpc('tools/list', undefined, 7))).status).toBe(200)
  })

  test.each<[string, Record<string, string | string[]>, unknown]>([
    ['Mcp-Method differs from the method', { 'mcp-method': 'tools/list' }, toolCall('echo', {}, 7)],
    ['Mcp-Name differs from the tool', { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }, toolCall('expensive_tool', {}, 7)],
    ['Mcp-Name on a method that names nothing', { 'mcp-method': 'tools/list', 'mcp-name': 'echo' }, rpc('tools/list', undefined, 7)],
    ['Mcp-Name missing on tools/call', { 'mcp-method': 'tools/call' }, toolCall('echo', {}, 7)],
    ['Mcp-Method missing beside Mcp-Name', { 'mcp-name': 'echo' }, toolCall('echo', {}, 7)],
    ['Mcp-Name sent twice', { 'mcp-method': 'tools/call', 'mcp-name': ['a', 'b'] }, toolCall('a, b', {}, 7)],
    [
      'Mcp-Name base64 that decodes to another tool',
      { 'mcp-method': 'tools/call', 'mcp-name': '=?base64?ZWNobw==?=' },
      toolCall('rm', {}, 7),
    ],
    ['Mcp-Name base64 that is not canonical', { 'mcp-method': 'tools/call', 'mcp-name': '=?base64?ZWNobw?=' }, toolCall('echo', {}, 7)],
  ])('%s: 400, -32020, the id echoed, nothing forwarded, one audit entry', async (_, headers, body) => {
    const before = upstream.seen.length
    const res = await post('cleo', headers, body)
    expect(res.status).toBe(400)
    expect(res.headers['content-type']).toMatch(/^application\/json/)
    const reply = JSON.parse(res.body) as { id: unknown; error: { code: number; message: string } }
    expect(reply.id).toBe(7)
    expect(reply.error.code).toBe(-32020)
    expect(reply.error.message).toMatch(/^Header mismatch: Mcp-(Method|Name) header (does not match the body|is missing)$/)
    expect(upstream.seen.length).toBe(before)
    const entries = await entriesFor(res.headers['x-wardline-request-id'])
    expect(entries).toHaveLength(1)
    expect(entries[0]).toMatchObject({ identity: 'cleo', decision: 'error', status: 400 })
    expect(entries[0].reason).toMatch(/^header mismatch: Mcp-(Method|Name) /)
  })

  test('a batch with Mcp-Method is refused whole, with one audit entry', async () => {
    const res = await post('cleo', { 'mcp-method': 'tools/call' }, [toolCall('echo', {}, 1), toolCall('echo', {}, 2)])
    expect(res.status).toBe(400)
    expect(JSON.parse(res.body)).toMatchObject({ id: null, error: { code: -32020 } })
    expect(await entriesFor(res.headers['x-wardline-request-id'])).toHaveLength(1)
  })

  test('a mismatch charges no budget, and the gateway keeps serving the same caller', async () => {
    expect((await post('dana', { 'mcp-method': 'tools/call', 'mcp-name': 'other' }, toolCall('echo', {}, 7))).status).toBe(400)
    // Her one unit of budget is still there, and then spent.
    expect((await post('dana', { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }, toolCall('echo', {}, 7))).status).toBe(200)
    expect((await post('dana', { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }, toolCall('echo', {}, 7))).status).toBe(429)
  })

  test('a notification with a mismatched Mcp-Method is not forwarded; like every refused notification it gets its status without a body', async () => {
    const before = upstream.seen.length
    const res = await post('cleo', { 'mcp-method': 'notifications/cancelled' }, { jsonrpc: '2.0', method: 'notifications/initialized' })
    expect(res.status).toBe(400)
    expect(res.body).toBe('')
    expect(upstream.seen.length).toBe(before)
    const entries = await entriesFor(res.headers['x-wardline-request-id'])
    expect(entries).toEqual([expect.objectContaining({ decision: 'error', status: 400 })])
    expect(entries[0].reason).toContain('Mcp-Method header "notifications/cancelled" does not match')
  })
})

describe('subscriptions/listen', () => {
  test('streams through untouched while the caller is at its in-flight cap and out of budget', async () => {
    // Budget spent: her one tools/call, then a 429.
    expect((await post('erin', {}, toolCall('echo', {}, 7))).status).toBe(200)
    expect((await post('erin', {}, toolCall('echo', {}, 7))).status).toBe(429)
    // Cap full (2): two standalone GET streams held open by the upstream.
    const streams = await Promise.all(
      [1, 2].map(() => open(`${h.url}/mcp`, { headers: { accept: 'text/event-stream', ...as('erin') }, signal: clients.signal })),
    )
    expect(streams.map((s) => s.statusCode)).toEqual([200, 200])
    for (const s of streams) collect(s)
    expect((await post('erin', {}, rpc('ping', undefined, 7))).status).toBe(429)

    const stream = await listen('erin')
    expect(stream.statusCode).toBe(200)
    expect(stream.headers['content-type']).toBe('text/event-stream')
    const got = collect(stream)
    await waitFor(() => got.text === ACK, { what: 'the acknowledgement, byte for byte' })
    const answer = held.at(-1) as ServerResponse
    answer.write(LIST_CHANGED)
    await waitFor(() => got.text === ACK + LIST_CHANGED, { what: 'the change notification, while the stream stays open' })
    expect(upstream.seen.at(-1)?.headers['mcp-method']).toBe('subscriptions/listen')

    // The stream is audited once it ends, as passthrough (not gated, not charged).
    const requestId = stream.headers['x-wardline-request-id']
    answer.end()
    const entries = await waitFor(
      async () => {
        const found = await entriesFor(requestId)
        return found.length > 0 && found
      },
      { what: "the listen stream's audit entry" },
    )
    expect(entries).toEqual([
      expect.objectContaining({ identity: 'erin', method: 'subscriptions/listen', decision: 'passthrough', status: 200 }),
    ])
  })

  test('an open listen stream holds no connection of the call pool (upstream_connections: 1)', async () => {
    const stream = await listen('fred')
    expect(stream.statusCode).toBe(200)
    collect(stream)
    // Before, the stream sat on the pool's one connection and this call waited for it until a 504.
    expect((await post('fred', { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }, toolCall('echo', {}, 7))).status).toBe(200)
    expect((await post('gus', {}, rpc('ping', undefined, 7))).status).toBe(200)
  })

  test('listen streams still count: past twice the cap, the next one gets 429', async () => {
    const streams = await Promise.all([1, 2, 3, 4].map(() => listen('hana')))
    expect(streams.map((s) => s.statusCode)).toEqual([200, 200, 200, 200])
    for (const s of streams) collect(s)
    const refused = await post('hana', { 'mcp-method': 'subscriptions/listen' }, rpc('subscriptions/listen', {}, 9))
    expect(refused.status).toBe(429)
    expect(JSON.parse(refused.body)).toMatchObject({ id: 9, error: { code: 429 } })
  })
})
