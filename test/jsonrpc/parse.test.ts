import { parseMessages } from '../../src/jsonrpc/parse'
import { JsonScanner, scanJson } from '../../src/json/scan'

const LIMITS = { maxJsonDepth: 64, maxBatchMessages: 100 }
const parse = (value: unknown, limits = LIMITS) =>
  parseMessages(Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)), limits)

describe('parsing JSON-RPC bodies', () => {
  test('a tools/call is gated and targets its tool name', () => {
    expect(parse({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: {} } })).toEqual({
      ok: true,
      batch: false,
      // where params.arguments lies in the body, for the loop breaker's fingerprint
      calls: [
        {
          id: 7,
          method: 'tools/call',
          target: 'echo',
          gated: true,
          policyMethod: 'tools/call',
          reason: '',
          reasonCode: null,
          noteKinds: 0,
          argumentsStart: 82,
          argumentsEnd: 84,
        },
      ],
    })
    expect(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'echo', arguments: {} } }).slice(82, 84)).toBe(
      '{}',
    )
  })

  test('a resource is judged by the uri the server reads, never by a caller-chosen name', () => {
    const parsed = parse({
      jsonrpc: '2.0',
      id: 1,
      method: 'resources/read',
      params: { uri: 'file:///etc/passwd', name: 'example://readme' },
    })
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
    [
      'a tool name',
      { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'a\u0000b' } },
      'tools/call target contains control characters',
    ],
    [
      'a resource uri',
      { jsonrpc: '2.0', id: 3, method: 'resources/read', params: { uri: 'x://a\nb' } },
      'resources/read target contains control characters',
    ],
    ['a method', { jsonrpc: '2.0', id: 3, method: 'tools/call\u0000' }, 'method contains control characters'],
  ])('control characters in %s are an invalid request with the id echoed', (_what, body, reason) => {
    expect(parse(body)).toEqual({ ok: false, code: -32600, id: 3, reason })
  })

  test('malformed JSON is a parse error with a null id', () => {
    expect(parse('{"jsonrpc":"2.0",')).toMatchObject({ ok: false, code: -32700, id: null })
  })

  test('a batch is classified element by element, and one bad element refuses it whole', () => {
    const good = parse([
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'add' } },
    ])
    expect(good.ok && good.calls.map((c) => [c.method, c.gated])).toEqual([
      ['notifications/initialized', false],
      ['tools/call', true],
    ])
    expect(
      parse([
        { jsonrpc: '2.0', id: 1, method: 'ping' },
        { jsonrpc: '1.0', id: 2, method: 'ping' },
      ]),
    ).toEqual({
      ok: false,
      code: -32600,
      id: null,
      reason: 'batch element 1: jsonrpc must be "2.0"',
    })
    expect(parse([])).toMatchObject({ ok: false, code: -32600 })
  })

  test("a client's response to a server request passes as an ungated message", () => {
    const parsed = parse({ jsonrpc: '2.0', id: 'srv-1', result: {} })
    expect(parsed.ok && parsed.calls[0]).toMatchObject({ id: 'srv-1', method: '', gated: false })
  })

  test('ids are strings, null or plain safe integers: 1.0, 1e2 and 2^53 + 1 read differently elsewhere', () => {
    for (const id of ['1.0', '1e2', '9007199254740993', '-0', 'true', '{}']) {
      expect(parse(`{"jsonrpc":"2.0","id":${id},"method":"ping"}`)).toMatchObject({ ok: false, code: -32600, id: null })
    }
    for (const [raw, id] of [
      ['-12', -12],
      ['0', 0],
      ['"a\\u00e9"', 'aé'],
      ['null', null],
    ] as const) {
      expect(parse(`{"jsonrpc":"2.0","id":${raw},"method":"ping"}`)).toMatchObject({ ok: true, calls: [{ id }] })
    }
  })
})

describe('completion/complete is judged as the call it completes', () => {
  const complete = (ref: unknown, id = 9) =>
    parse({ jsonrpc: '2.0', id, method: 'completion/complete', params: { ref, argument: { name: 'name', value: 'Al' } } })

  test("a prompt's completion targets the prompt name and is judged as prompts/get", () => {
    expect(complete({ type: 'ref/prompt', name: 'greeting' })).toEqual({
      ok: true,
      batch: false,
      calls: [
        {
          id: 9,
          method: 'completion/complete',
          target: 'greeting',
          gated: true,
          policyMethod: 'prompts/get',
          reason: '',
          reasonCode: null,
          noteKinds: 0,
          argumentsStart: -1,
          argumentsEnd: -1,
        },
      ],
    })
  })

  test("a resource's completion targets its URI and is judged as resources/read", () => {
    expect(complete({ type: 'ref/resource', uri: 'example://readme' })).toMatchObject({
      ok: true,
      calls: [{ method: 'completion/complete', target: 'example://readme', gated: true, policyMethod: 'resources/read' }],
    })
  })

  test.each([
    'test://static/resource/{id}',
    'file:///docs/{+path}',
    'example://search{?q,limit}',
    'example://users/{id}/posts/{post:3}',
    'example://{host}/x/{list*}',
    'example://a/{x.y}{/seg}{#frag}{;p}{&more}',
    'example://plain-uri-no-template',
  ])('a URI template %s is judged by its text, braces and all', (uri) => {
    expect(complete({ type: 'ref/resource', uri })).toMatchObject({ ok: true, calls: [{ target: uri, policyMethod: 'resources/read' }] })
  })

  test.each([
    [
      'a climbing literal part',
      'file:///public/../{id}',
      /with each expression read as x: resource URI "file:\/\/\/public\/..\/x" is not in normal form/,
    ],
    ['an upper-case scheme', 'EXAMPLE://notes/{id}', /not in normal form/],
    ['an empty path segment', 'file:///a//{id}', /empty path segment/],
    ['an escaped letter', 'file:///priv%61te/{id}', /percent-escape/],
    ['an unclosed expression', 'example://notes/{id', /a brace outside an RFC 6570 expression/],
    ['an empty expression', 'example://notes/{}', /a brace outside an RFC 6570 expression/],
    ['a path inside braces', 'example://notes/{../secret}', /a brace outside an RFC 6570 expression/],
    ['a lone closing brace', 'example://notes/id}', /a brace outside an RFC 6570 expression/],
    ['no scheme', '{+base}/notes', /is not an absolute URI/],
  ])('a template with %s is refused rather than guessed at', (_what, uri, reason) => {
    const parsed = complete({ type: 'ref/resource', uri }, 4)
    expect(parsed).toMatchObject({ ok: false, code: -32600, id: 4 })
    expect(!parsed.ok && parsed.reason).toMatch(reason)
  })

  test.each([
    ['no params', { jsonrpc: '2.0', id: 2, method: 'completion/complete' }, 'completion/complete needs params.ref as an object'],
    [
      'no ref',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { argument: { name: 'a', value: '' } } },
      'completion/complete needs params.ref as an object',
    ],
    [
      'a ref that is not an object',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: 'greeting' } },
      'completion/complete needs params.ref as an object',
    ],
    [
      'a ref type MCP does not define',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/tool', name: 'echo' } } },
      'completion/complete needs params.ref.type "ref/prompt" or "ref/resource"',
    ],
    [
      'a ref without a type',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { name: 'greeting' } } },
      'completion/complete needs params.ref.type "ref/prompt" or "ref/resource"',
    ],
    [
      'a prompt ref without its name',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/prompt', uri: 'example://readme' } } },
      'completion/complete needs params.ref.name as a string for ref/prompt',
    ],
    [
      'a resource ref without its uri',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/resource', name: 'readme' } } },
      'completion/complete needs params.ref.uri as a string for ref/resource',
    ],
    [
      'a prompt name that is not a string',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/prompt', name: 7 } } },
      'completion/complete needs params.ref.name as a string for ref/prompt',
    ],
    [
      'control characters in the name',
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/prompt', name: 'a\u0007b' } } },
      'completion/complete target contains control characters',
    ],
  ])('a completion with %s is an invalid request: nothing to judge it by', (_what, body, reason) => {
    expect(parse(body)).toEqual({ ok: false, code: -32600, id: 2, reason })
  })

  test('a completion in a batch is a gated element of its own', () => {
    const parsed = parse([
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 2, method: 'completion/complete', params: { ref: { type: 'ref/prompt', name: 'greeting' } } },
    ])
    expect(parsed.ok && parsed.calls.map((c) => [c.method, c.gated, c.policyMethod, c.target])).toEqual([
      ['ping', false, '', ''],
      ['completion/complete', true, 'prompts/get', 'greeting'],
    ])
  })
})

describe('tasks (MCP 2025-11-25)', () => {
  test('a task-augmented tools/call is judged by its tool name like any other', () => {
    const parsed = parse({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'report', arguments: {}, task: { ttl: 60000 } } })
    expect(parsed).toMatchObject({ ok: true, calls: [{ method: 'tools/call', target: 'report', gated: true, policyMethod: 'tools/call' }] })
  })

  test('a case variant of task is refused: a Go-style server would run the call as a task, others would not', () => {
    const parsed = parse('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"report","Task":{"ttl":1}}}')
    expect(parsed).toMatchObject({ ok: false, code: -32600, reason: 'key "Task" in params is a case variant of "task"' })
  })

  test('tasks/get, tasks/result, tasks/list and tasks/cancel pass ungated: the work was judged when its task was created', () => {
    for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel', 'tasks/list']) {
      const parsed = parse({ jsonrpc: '2.0', id: 1, method, params: method === 'tasks/list' ? {} : { taskId: 'abc' } })
      expect(parsed.ok && parsed.calls[0]).toMatchObject({ method, target: '', gated: false, policyMethod: '' })
    }
  })
})

/** Requests that a Go-style (case-insensitive, last-wins) upstream would run as another call. */
const AMBIGUOUS: ReadonlyArray<readonly [string, string, RegExp]> = [
  [
    'Method beside method',
    '{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"expensive_tool"}}',
    /keys "method" and "Method" in the message are equal under case folding/,
  ],
  [
    'Name beside name',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"expensive_tool"}}',
    /keys "name" and "Name" in params/,
  ],
  [
    'PARAMS beside params',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"PARAMS":{"name":"expensive_tool"}}',
    /"params" and "PARAMS"/,
  ],
  [
    'Paramſ (upper case and ſ in one key)',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"Paramſ":{"name":"expensive_tool"}}',
    /"params" and "Paramſ"/,
  ],
  [
    'paramſ (Go folds ſ to s)',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"paramſ":{"name":"expensive_tool"}}',
    /"params" and "paramſ"/,
  ],
  [
    'METHOD beside ping',
    '{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"expensive_tool"}}',
    /"method" and "METHOD"/,
  ],
  [
    'a duplicate method',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"ping","params":{"name":"x"}}',
    /duplicate key "method" in the message/,
  ],
  [
    'a duplicate tool name',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"expensive_tool"}}',
    /duplicate key "name" in params/,
  ],
  [
    'an escaped duplicate',
    '{"jsonrpc":"2.0","id":1,"\\u006dethod":"ping","method":"tools/call","params":{"name":"x"}}',
    /duplicate key "method"/,
  ],
  [
    'Method alone',
    '{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"x"}}',
    /key "Method" in the message is a case variant of "method"/,
  ],
  ['Params alone', '{"jsonrpc":"2.0","id":1,"method":"tools/call","Params":{"name":"x"}}', /case variant of "params"/],
  [
    'Arguments beside arguments',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"Arguments":{"p":1}}}',
    /"arguments" and "Arguments"/,
  ],
  [
    'the Kelvin sign',
    '{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"a","\u212Aey":1,"key":2}}',
    /equal under case folding/,
  ],
  ['a URI in another case', '{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a:/x","URI":"b:/y"}}', /"uri" and "URI"/],
  [
    'a duplicate in a batch element',
    '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping","method":"tools/call"}]',
    /^batch element 1: duplicate key "method"/,
  ],
  [
    'a duplicate ref uri',
    '{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/resource","uri":"a:/x","uri":"b:/y"},"argument":{"name":"n","value":""}}}',
    /duplicate key "uri" in params.ref/,
  ],
]

describe('one reading of every message', () => {
  test.each(AMBIGUOUS)('%s is refused as an invalid request', (_what, body, reason) => {
    const parsed = parse(body)
    expect(parsed).toMatchObject({ ok: false, code: -32600 })
    expect(!parsed.ok && parsed.reason).toMatch(reason)
  })

  test("keys the gateway does not judge may repeat deeper down (arguments are the tool's business)", () => {
    const parsed = parse(
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"opts":{"a":1,"a":2},"A":1,"a":3}}}',
    )
    expect(parsed).toMatchObject({ ok: true, calls: [{ target: 'x' }] })
  })

  test('a lone surrogate escape and invalid UTF-8 are parse errors: decoders turn them into different names', () => {
    expect(parse('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\\ud800"}}')).toMatchObject({
      ok: false,
      code: -32700,
      reason: expect.stringContaining('lone UTF-16 surrogate') as unknown,
    })
    expect(parse('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\\udc00b"}}')).toMatchObject({ ok: false, code: -32700 })
    const invalid = Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a'),
      Buffer.from([0xff]),
      Buffer.from('"}}'),
    ])
    expect(parseMessages(invalid, LIMITS)).toMatchObject({ ok: false, code: -32700, reason: 'malformed JSON: body is not valid UTF-8' })
    expect(parse('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\ud83d\\ude00"}}')).toMatchObject({
      ok: true,
      calls: [{ target: '😀' }],
    })
  })

  test('nesting past max_json_depth is refused without parsing, in time linear in the body', () => {
    const deep = '['.repeat(500_000) + ']'.repeat(500_000)
    const started = performance.now()
    expect(parse(deep)).toEqual({ ok: false, code: -32600, id: null, reason: 'JSON nested deeper than 64 levels (max_json_depth)' })
    expect(performance.now() - started).toBeLessThan(1000) // generous: JSON.parse took 0.8–1.3 s on this body
    const call = (depth: number) =>
      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":${'['.repeat(depth)}${']'.repeat(depth)}}}`
    expect(parse(call(62))).toMatchObject({ ok: true }) // the message is level 1, params 2: 2 + 62 = 64
    expect(parse(call(63))).toMatchObject({ ok: false, code: -32600 })
  })

  test('a batch longer than max_batch_messages is refused as soon as the scanner meets the extra element', () => {
    const batch = (n: number) => JSON.stringify(Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' })))
    expect(parse(batch(100))).toMatchObject({ ok: true })
    expect(parse(batch(101))).toEqual({
      ok: false,
      code: -32600,
      id: null,
      reason: 'batch has more than 100 messages (max_batch_messages)',
    })
    expect(parse(batch(3), { maxJsonDepth: 64, maxBatchMessages: 2 })).toMatchObject({ ok: false, code: -32600 })
  })

  test.each([
    ['a climbing path', 'file:///public/../private/secret', /not in normal form \(a server reads it as "file:\/\/\/private\/secret"\)/],
    ['encoded dots', 'file:///public/%2e%2e/private/secret', /not in normal form/],
    ['an encoded slash', 'file:///public/..%2Fprivate/secret', /percent-escape a server could decode otherwise/],
    ['backslashes', 'file:///public\\..\\private\\secret', /not in normal form/],
    ['an upper-case scheme', 'EXAMPLE://secret', /a server reads it as "example:\/\/secret"/],
    ['surrounding whitespace', ' example://secret', /not in normal form/],
    ['no scheme', 'secret', /is not an absolute URI/],
    ['an escaped letter', 'file:///priv%61te/secret', /percent-escape a server could decode otherwise/],
    ['lower-case hex', 'file:///caf%c3%a9', /percent-escape/],
    ['a lone %', 'file:///100%', /percent-escape/],
    ['an empty path segment', 'file:////private/secret', /empty path segment/],
    ['an empty segment further down', 'file:///public//secret', /empty path segment/],
  ])('a resource URI with %s is refused rather than guessed at', (_what, uri, reason) => {
    for (const method of ['resources/read', 'resources/subscribe']) {
      const parsed = parse({ jsonrpc: '2.0', id: 4, method, params: { uri } })
      expect(parsed).toMatchObject({ ok: false, code: -32600, id: 4 })
      expect(!parsed.ok && parsed.reason).toMatch(reason)
    }
    const completion = parse({
      jsonrpc: '2.0',
      id: 5,
      method: 'completion/complete',
      params: { ref: { type: 'ref/resource', uri }, argument: { name: 'a', value: '' } },
    })
    expect(completion).toMatchObject({ ok: false, code: -32600, id: 5 })
  })

  test('a URI already in normal form is judged as it stands', () => {
    for (const uri of [
      'file:///public/readme.md',
      'example://secret',
      'https://example.com/a?b=c',
      'test://static/resource/1',
      'file:///caf%C3%A9',
      'file:///a%20b',
      'urn:isbn:0451450523',
    ]) {
      expect(parse({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri } })).toMatchObject({
        ok: true,
        calls: [{ target: uri }],
      })
    }
  })
})

describe('bounded reading', () => {
  const keys = (n: number) => Array.from({ length: n }, (_, i) => `"k${i}":0`).join(',')

  test('an envelope or the params of a gated call with more than 64 members is refused, cheaply', () => {
    expect(parse(`{"jsonrpc":"2.0","id":1,"method":"ping",${keys(61)}}`)).toMatchObject({ ok: true })
    expect(parse(`{"jsonrpc":"2.0","id":1,"method":"ping",${keys(62)}}`)).toMatchObject({
      ok: false,
      code: -32600,
      reason: 'message has more than 64 members',
    })
    expect(parse(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x",${keys(64)}}}`)).toMatchObject({
      ok: false,
      reason: 'params has more than 64 members',
    })
    const started = performance.now()
    expect(parse(`{"jsonrpc":"2.0","id":1,"method":"ping",${keys(400_000)}}`)).toMatchObject({
      ok: false,
      reason: 'message has more than 64 members',
    })
    expect(performance.now() - started).toBeLessThan(2000) // generous: reading them all took 230 ms of one block
  })

  test('the params of a method the gateway does not judge may have any number of members', () => {
    expect(parse(`{"jsonrpc":"2.0","id":1,"method":"myapp/bulk","params":{${keys(1000)}}}`)).toMatchObject({
      ok: true,
      calls: [{ method: 'myapp/bulk', gated: false }],
    })
  })

  test('a target that is not a string, or missing where the schema needs one, is refused rather than judged as nothing', () => {
    expect(parse({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: 7 } })).toMatchObject({
      ok: false,
      reason: 'resources/read needs params.uri as a string',
    })
    expect(parse({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: {} })).toMatchObject({
      ok: false,
      reason: 'resources/read needs params.uri as a string',
    })
    expect(parse({ jsonrpc: '2.0', id: 1, method: 'prompts/get', params: { name: ['greeting'] } })).toMatchObject({
      ok: false,
      reason: 'prompts/get needs params.name as a string',
    })
    expect(parse({ jsonrpc: '2.0', id: 1, method: 'prompts/get' })).toMatchObject({ ok: false })
  })
})

describe('the scanner agrees with JSON.parse on what is JSON', () => {
  const cases = [
    '{}',
    '[]',
    '{"a":[1,2,{"b":null}]}',
    '  {"a" : "b" }\n',
    '{"a":-0.5e+10}',
    '{"a":"\\\\\\"\\/\\b\\f\\n\\r\\t"}',
    '{"a":01}',
    '{"a":1.}',
    '{"a":.5}',
    '{"a":+1}',
    '{"a":1e}',
    '{"a":tru}',
    '{"a":nul}',
    '{"a":"\\x"}',
    '{"a":"\\u12"}',
    '{"a" "b"}',
    '{"a":1,}',
    '[1,]',
    '[1 2]',
    '{"a":1}}',
    '{"a":1}{',
    '{a:1}',
    "{'a':1}",
    '{"a":"b\tc"}',
    '\ufeff{}',
    '{"a":NaN}',
    '{"a":Infinity}',
    '[',
    '"',
    '{"a":"\\u0000"}',
    '{"a":1}x',
    '',
    ' ',
    '{"a":[}',
    '{"a":{]}',
  ]
  test.each(cases)('%j', (text) => {
    const source = text
    let parses = true
    try {
      JSON.parse(source)
    } catch {
      parses = false
    }
    const result = parseMessages(Buffer.from(source), LIMITS)
    const malformed = !result.ok && result.code === -32700
    expect(malformed).toBe(!parses)
  })
})

describe('scanning in slices', () => {
  const bodies = [
    ...AMBIGUOUS.map(([, body]) => body),
    JSON.stringify([
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'echo', arguments: { text: 'x'.repeat(300), n: [1, 2.5e3, true, null] } },
      },
      { jsonrpc: '2.0', method: 'notifications/initialized' },
    ]),
    '{"jsonrpc":"2.0","id":"a\\u00e9\\ud83d\\ude00","method":"prompts/get","params":{"name":"caf\u00e9"}}',
    '[' + '[]'.repeat(50) + ']',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}} x',
  ]
  test.each(bodies.map((b) => [b.slice(0, 60), b]))('%s… reads the same in slices of any size', (_label, body) => {
    const buffer = Buffer.from(body)
    const whole = scanJson(buffer, LIMITS)
    for (const slice of [1, 2, 3, 7, 64]) {
      const scanner = new JsonScanner(buffer, LIMITS)
      let result = scanner.step(slice)
      let steps = 1
      while (result === null) {
        result = scanner.step(slice)
        steps++
      }
      expect(result).toEqual(whole)
      if (slice === 1 && buffer.length > 20) expect(steps).toBeGreaterThan(2)
    }
  })
})
