/**
 * The mcp-headers stage on its own (MCP 2026-07-28 Mcp-Method / Mcp-Name against the parsed body) and
 * isStream, on Exchanges built from real Node request objects and the real parser.
 * test/e2e/mcp-headers.test.ts checks the same through a running gateway.
 */
import { HEADER_MISMATCH, mcpHeadersStage } from '../../src/jsonrpc/mcp-headers'
import { isStream } from '../../src/mcp/streams'
import { parseMessages } from '../../src/jsonrpc/parse'
import type { Exchange } from '../../src/pipeline/exchange'
import { CONTINUE, type Refusal, type Verdict } from '../../src/pipeline/stage'
import { exchangeWithHeaders } from '../helpers/exchange'

const LIMITS = { maxJsonDepth: 64, maxBatchMessages: 100 }

/** An Exchange as the jsonrpc stage leaves it: headers as Node reads them (repeats joined), the body parsed. */
function exchange(body: unknown, headers: Array<[string, string]>, method = 'POST'): Exchange {
  const ex = exchangeWithHeaders(method, headers)
  if (method === 'POST') {
    const parsed = parseMessages(Buffer.from(JSON.stringify(body)), LIMITS)
    if (!parsed.ok) throw new Error(`test body does not parse: ${parsed.reason}`)
    ex.calls = parsed.calls
    ex.batch = parsed.batch
  }
  return ex
}

const stage = mcpHeadersStage()
const run = (body: unknown, ...headers: Array<[string, string]>): Verdict => stage.run(exchange(body, headers)) as Verdict

function refusal(verdict: Verdict): Refusal {
  if (verdict === CONTINUE) throw new Error('expected a refusal, got CONTINUE')
  return verdict
}

const call = (name: string, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {} } })
const rpc = (method: string, params?: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 1, method, params })
const notification = (method: string, params?: Record<string, unknown>) => ({ jsonrpc: '2.0', method, params })
const base64 = (text: string) => `=?base64?${Buffer.from(text, 'utf8').toString('base64')}?=`

describe('requests whose headers match the body go on', () => {
  test('a request without either header is not looked at', () => {
    expect(run(call('echo'))).toBe(CONTINUE)
    expect(run([call('echo'), call('add', 2)])).toBe(CONTINUE) // batches of earlier revisions
  })

  test.each([
    ['tools/call', call('echo'), 'echo'],
    ['resources/read', rpc('resources/read', { uri: 'file:///projects/app/config.json' }), 'file:///projects/app/config.json'],
    ['prompts/get', rpc('prompts/get', { name: 'review' }), 'review'],
  ])('%s with Mcp-Method and its Mcp-Name', (method, body, name) => {
    expect(run(body, ['Mcp-Method', method], ['Mcp-Name', name])).toBe(CONTINUE)
  })

  test('header names in any case', () => {
    expect(run(call('echo'), ['MCP-METHOD', 'tools/call'], ['mcp-name', 'echo'])).toBe(CONTINUE)
  })

  test('Mcp-Method alone on methods that name nothing, notifications included', () => {
    expect(run(rpc('tools/list'), ['Mcp-Method', 'tools/list'])).toBe(CONTINUE)
    expect(run(rpc('subscriptions/listen', { notifications: { toolsListChanged: true } }), ['Mcp-Method', 'subscriptions/listen'])).toBe(
      CONTINUE,
    )
    expect(run(notification('notifications/initialized'), ['Mcp-Method', 'notifications/initialized'])).toBe(CONTINUE)
  })

  test('a name outside plain ASCII travels base64-encoded and is compared decoded', () => {
    expect(run(call('Hello, 世界'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', '=?base64?SGVsbG8sIOS4lueVjA==?='])).toBe(CONTINUE)
    expect(run(call(' padded '), ['Mcp-Method', 'tools/call'], ['Mcp-Name', base64(' padded ')])).toBe(CONTINUE)
    // A plain name that looks like the sentinel is sent encoded too (MCP 2026-07-28, Value Encoding).
    expect(run(call('=?base64?literal?='), ['Mcp-Method', 'tools/call'], ['Mcp-Name', '=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?='])).toBe(
      CONTINUE,
    )
  })

  test('GET requests are never looked at', () => {
    expect(stage.run(exchange(null, [['Mcp-Method', 'anything']], 'GET'))).toBe(CONTINUE)
  })
})

describe('headers that disagree with the body: 400, -32020, a reason naming the header and both values', () => {
  test('Mcp-Method differs from the method, case included', () => {
    const r = refusal(run(call('echo'), ['Mcp-Method', 'Tools/call'], ['Mcp-Name', 'echo']))
    expect(r).toMatchObject({ status: 400, decision: 'error', rpcCode: HEADER_MISMATCH })
    expect(r.message).toBe('Header mismatch: Mcp-Method header does not match the body')
    expect(r.reason).toBe('header mismatch: Mcp-Method header "Tools/call" does not match the body\'s method "tools/call"')
  })

  test('Mcp-Name differs from the tool name', () => {
    const r = refusal(run(call('expensive_tool'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', 'echo']))
    expect(r).toMatchObject({ status: 400, decision: 'error', rpcCode: HEADER_MISMATCH })
    expect(r.message).toBe('Header mismatch: Mcp-Name header does not match the body')
    expect(r.reason).toBe('header mismatch: Mcp-Name header "echo" does not match the body\'s target "expensive_tool" (tools/call)')
  })

  test('Mcp-Name differs from a resource URI, or from a base64-encoded name once decoded', () => {
    const uri = refusal(
      run(rpc('resources/read', { uri: 'file:///private/key' }), ['Mcp-Method', 'resources/read'], ['Mcp-Name', 'file:///public/a']),
    )
    expect(uri.reason).toContain('"file:///public/a" does not match the body\'s target "file:///private/key"')
    const encoded = refusal(run(call('café'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', base64('cafe')]))
    expect(encoded.reason).toContain('Mcp-Name header "cafe" does not match the body\'s target "café"')
  })

  test('Mcp-Name on a method that names nothing', () => {
    const r = refusal(run(rpc('tools/list'), ['Mcp-Method', 'tools/list'], ['Mcp-Name', 'echo']))
    expect(r.rpcCode).toBe(HEADER_MISMATCH)
    expect(r.reason).toBe('header mismatch: Mcp-Name header "echo" on method "tools/list", which names no target')
  })

  test.each(['tools/call', 'resources/read', 'prompts/get'])('Mcp-Name missing where Mcp-Method says %s', (method) => {
    const body = method === 'tools/call' ? call('echo') : rpc(method, method === 'resources/read' ? { uri: 'file:///a' } : { name: 'p' })
    const r = refusal(run(body, ['Mcp-Method', method]))
    expect(r).toMatchObject({ status: 400, rpcCode: HEADER_MISMATCH, message: 'Header mismatch: Mcp-Name header is missing' })
    expect(r.reason).toBe(`header mismatch: Mcp-Name header missing; ${method} requires it`)
  })

  test('Mcp-Name without Mcp-Method', () => {
    const r = refusal(run(call('echo'), ['Mcp-Name', 'echo']))
    expect(r).toMatchObject({ rpcCode: HEADER_MISMATCH, message: 'Header mismatch: Mcp-Method header is missing' })
    expect(r.reason).toBe('header mismatch: Mcp-Name header "echo" without Mcp-Method')
  })

  test('a header sent twice, even with equal values', () => {
    expect(refusal(run(call('echo'), ['Mcp-Method', 'tools/call'], ['mcp-method', 'tools/call'], ['Mcp-Name', 'echo'])).reason).toBe(
      'header mismatch: Mcp-Method header sent more than once',
    )
    // Joined by Node, "a, b" would match a tool named "a, b" while a proxy reading the first copy sees "a".
    expect(refusal(run(call('a, b'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', 'a'], ['Mcp-Name', 'b'])).reason).toBe(
      'header mismatch: Mcp-Name header sent more than once',
    )
  })

  test('a batch body, which one Mcp-Method cannot describe', () => {
    const r = refusal(run([call('echo'), call('echo', 2)], ['Mcp-Method', 'tools/call']))
    expect(r.reason).toBe('header mismatch: Mcp-Method header "tools/call" on a batch (this revision sends one message per POST)')
  })

  test('a JSON-RPC response body, which has no method', () => {
    const r = refusal(run({ jsonrpc: '2.0', id: 1, result: {} }, ['Mcp-Method', 'ping']))
    expect(r.reason).toBe('header mismatch: Mcp-Method header "ping" does not match the body\'s response (no method)')
  })

  test('values outside plain visible ASCII, which other readers decode differently', () => {
    // Node reads header bytes as Latin-1: the raw UTF-8 of "café" arrives as "cafÃ©", and a raw
    // Latin-1 "é" would equal the body's "é" here but not for a proxy decoding UTF-8.
    const latin1 = refusal(run(call('café'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', 'café']))
    expect(latin1.reason).toBe('header mismatch: Mcp-Name header "café" is neither plain visible ASCII nor valid =?base64?…?= of UTF-8')
    expect(refusal(run(rpc('tööls'), ['Mcp-Method', 'tööls'])).reason).toBe(
      'header mismatch: Mcp-Method header "tööls" is not plain visible ASCII',
    )
  })

  test.each([
    ['unpadded', '=?base64?ZWNobw?='],
    ['url-safe alphabet', `=?base64?${Buffer.from('a>?b').toString('base64url')}?=`],
    ['non-zero pad bits', '=?base64?ZWNobx==?='],
    ['invalid UTF-8', `=?base64?${Buffer.from([0x65, 0xff]).toString('base64')}?=`],
    ['whitespace inside', '=?base64?ZWNo bw==?='],
    ['overlapping sentinel ends', '=?base64?='],
  ])('malformed base64 Mcp-Name (%s)', (_, value) => {
    expect(refusal(run(call('echo'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', value])).rpcCode).toBe(HEADER_MISMATCH)
  })

  test('a caller-sized value is cut short in the reason', () => {
    const r = refusal(run(call('echo'), ['Mcp-Method', 'tools/call'], ['Mcp-Name', 'x'.repeat(5000)]))
    expect(r.reason.length).toBeLessThan(400)
  })
})

describe('isStream: requests whose answer stays open, kept off the bounded upstream pool', () => {
  test('a GET, and a lone subscriptions/listen request', () => {
    expect(isStream(exchange(null, [], 'GET'))).toBe(true)
    expect(isStream(exchange(rpc('subscriptions/listen', { notifications: {} }), []))).toBe(true)
  })

  test('not a call, a listen notification, or a batch holding a listen', () => {
    expect(isStream(exchange(call('echo'), []))).toBe(false)
    expect(isStream(exchange(notification('subscriptions/listen', {}), []))).toBe(false)
    expect(isStream(exchange([rpc('subscriptions/listen', {}), call('echo', 2)], []))).toBe(false)
  })
})
