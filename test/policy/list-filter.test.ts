import { filterListMessage } from '../../src/policy/list-filter'

/** The `result` of the one message in `text`. */
function resultOf(text: string): Record<string, unknown> {
  return (JSON.parse(text) as { result: Record<string, unknown> }).result
}

/** Allows tools whose name starts with `ok`, prompts named `hello`, resources under example://public/. */
function allowed(kind: { key: string }, target: string): boolean {
  if (kind.key === 'tools') return target.startsWith('ok')
  if (kind.key === 'prompts') return target === 'hello'
  return target.startsWith('example://public/')
}

function tools(...names: string[]): string {
  return names.map((n) => `{"name":"${n}","inputSchema":{"type":"object"}}`).join(',')
}

describe('filterListMessage', () => {
  test('hides what the caller may not call and keeps every other byte as it was', () => {
    const text = `{"jsonrpc":"2.0","id":7,"result":{"tools":[${tools('ok_a', 'secret', 'ok_b')}],"nextCursor":"c2"}}`
    const out = filterListMessage(text, allowed)
    expect(out.text).toBe(`{"jsonrpc":"2.0","id":7,"result":{"tools":[${tools('ok_a', 'ok_b')}],"nextCursor":"c2"}}`)
    expect(out.counts).toEqual([expect.objectContaining({ id: 7, hidden: 1, total: 3 })])
  })

  test('an answer where nothing is hidden is the very same string', () => {
    const text = `{ "jsonrpc" : "2.0", "id": 1, "result": { "tools": [ ${tools('ok_1')} ], "x": 1.50 } }`
    const out = filterListMessage(text, allowed)
    expect(out.text).toBe(text)
    expect(out.counts).toEqual([])
  })

  test('numbers, spacing and unicode outside the removed entries survive', () => {
    const text = `{"id":"a","jsonrpc":"2.0","result":{"_meta":{"big":12345678901234567890,"f":1.0},"tools":[ {"name":"ok_é\\u00e9"} , {"name":"nope"} ]}}`
    const out = filterListMessage(text, allowed).text
    expect(out).toBe(`{"id":"a","jsonrpc":"2.0","result":{"_meta":{"big":12345678901234567890,"f":1.0},"tools":[{"name":"ok_é\\u00e9"}]}}`)
  })

  test('prompts, resources and resource templates are judged by name, uri and uriTemplate', () => {
    const prompts = `{"jsonrpc":"2.0","id":1,"result":{"prompts":[{"name":"hello"},{"name":"exfiltrate"}]}}`
    expect(resultOf(filterListMessage(prompts, allowed).text).prompts).toEqual([{ name: 'hello' }])
    const resources = `{"jsonrpc":"2.0","id":2,"result":{"resources":[{"uri":"example://public/a","name":"a"},{"uri":"file:///etc/passwd","name":"example://public/x"}]}}`
    expect(resultOf(filterListMessage(resources, allowed).text).resources).toEqual([{ uri: 'example://public/a', name: 'a' }])
    const templates = `{"jsonrpc":"2.0","id":3,"result":{"resourceTemplates":[{"uriTemplate":"example://public/{id}"},{"uriTemplate":"file:///{path}"}]}}`
    expect(resultOf(filterListMessage(templates, allowed).text).resourceTemplates).toEqual([{ uriTemplate: 'example://public/{id}' }])
  })

  test('a batch answer is filtered element by element, whatever the ids say', () => {
    // Two list calls under one id: the answer's shape, not the id, says what it lists.
    const text = `[{"jsonrpc":"2.0","id":1,"result":{"prompts":[{"name":"hello"},{"name":"bad"}]}},{"jsonrpc":"2.0","id":1,"result":{"tools":[${tools('x', 'ok')}]}},{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}]`
    const out = JSON.parse(filterListMessage(text, allowed).text) as Array<{ result?: Record<string, Array<{ name: string }>> }>
    expect(out[0].result?.prompts.map((p) => p.name)).toEqual(['hello'])
    expect(out[1].result?.tools.map((t) => t.name)).toEqual(['ok'])
    expect(out[2]).toEqual({ jsonrpc: '2.0', id: 2, error: { code: 1, message: 'm' } })
  })

  test('entries without a string name are hidden; an empty page stays a page with its cursor', () => {
    const text = `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":5},"junk",null,{"title":"x"}],"nextCursor":"n"}}`
    expect(filterListMessage(text, allowed).text).toBe(`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"nextCursor":"n"}}`)
  })

  test('duplicate keys: the message is re-encoded so a first-key-wins client reads the judged list too', () => {
    const text = `{"jsonrpc":"2.0","id":1,"result":{"tools":[${tools('secret')}],"tools":[${tools('ok', 'secret2')}]}}`
    const out = filterListMessage(text, allowed).text
    expect(out).not.toContain('secret')
    expect(resultOf(out).tools).toEqual([{ name: 'ok', inputSchema: { type: 'object' } }])
    const twoResults = `{"jsonrpc":"2.0","id":1,"result":{"tools":[${tools('secret')}]},"result":{"tools":[${tools('ok', 'secret2')}]}}`
    expect(filterListMessage(twoResults, allowed).text).not.toContain('secret')
  })

  test('strings holding brackets, quotes and escapes do not confuse the cut', () => {
    const text = `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"nope","description":"a ] } \\" [ {"},{"name":"ok","description":"\\\\"}]}}`
    expect(resultOf(filterListMessage(text, allowed).text).tools).toEqual([{ name: 'ok', description: '\\' }])
  })

  test('text that is not JSON, requests and notifications pass untouched', () => {
    for (const text of [
      'not json',
      '{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}',
      '{"jsonrpc":"2.0","id":1,"result":{"content":[]}}',
    ]) {
      expect(filterListMessage(text, allowed)).toEqual({ text, counts: [] })
    }
  })
})
