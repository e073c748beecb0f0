import { parseMessages } from '../../src/jsonrpc/parse'

const parse = (value: unknown) => parseMessages(Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)))

describe('parsing JSON-RPC bodies', () => {
  test('a tools/call is gated and targets its tool name', () => {
    expect(parse({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: {} } })).toEqual({
      ok: true,
      batch: false,
      calls: [{ id: 7, method: 'tools/call', target: 'echo', gated: true, reason: '' }],
    })
  })

  test('a resource is judged by the uri the server reads, never by a caller-chosen name', () => {
    const parsed = parse({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: 'file:///etc/passwd', name: 'example://readme' } })
    expect(parsed.ok && parsed.calls[0].target).toBe('file:///etc/passwd')
  })

  test('a list names no target, whatever uri or name the caller adds (the server ignores them)', () => {
    for (const method of ['resources/list', 'resources/templates/list', 'prompts/list']) {
      const parsed = parse({ jsonrpc: '2.0', id: 1, method, params: { uri: 'example://x', name: 'greeting' } })
      expect(parsed.ok && parsed.calls[0]).toMatchObject({ method, target: '', gated: true })
    }
  })

  test('a prompt is judged by its name', () => {
    const parsed = parse({ jsonrpc: '2.0', id: 1, method: 'prompts/get', params: { name: 'greeting' } })
    expect(parsed.ok && parsed.calls[0]).toMatchObject({ target: 'greeting', gated: true })
  })

  test.each([
    ['a tool name', { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'a\u0000b' } }, 'tools/call target contains control characters'],
    ['a resource uri', { jsonrpc: '2.0', id: 3, method: 'resources/read', params: { uri: 'x://a\nb' } }, 'resources/read target contains control characters'],
    ['a method', { jsonrpc: '2.0', id: 3, method: 'tools/call\u0000' }, 'method contains control characters'],
  ])('control characters in %s are an invalid request with the id echoed', (_what, body, reason) => {
    expect(parse(body)).toEqual({ ok: false, code: -32600, id: 3, reason })
  })

  test('malformed JSON is a parse error with a null id', () => {
    expect(parse('{"jsonrpc":"2.0",')).toMatchObject({ ok: false, code: -32700, id: null })
  })

  test('a batch is classified element by element, and one bad element refuses it whole', () => {
    const good = parse([{ jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'add' } }])
    expect(good.ok && good.calls.map((c) => [c.method, c.gated])).toEqual([['notifications/initialized', false], ['tools/call', true]])
    expect(parse([{ jsonrpc: '2.0', id: 1, method: 'ping' }, { jsonrpc: '1.0', id: 2, method: 'ping' }])).toEqual({
      ok: false, code: -32600, id: null, reason: 'batch element 1: jsonrpc must be "2.0"',
    })
    expect(parse([])).toMatchObject({ ok: false, code: -32600 })
  })

  test("a client's response to a server request passes as an ungated message", () => {
    const parsed = parse({ jsonrpc: '2.0', id: 'srv-1', result: {} })
    expect(parsed.ok && parsed.calls[0]).toMatchObject({ id: 'srv-1', method: '', gated: false })
  })
})
