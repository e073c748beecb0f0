import type { Effect, PolicyConfig, PolicyRule } from '../../src/config/types'
import { compilePolicy } from '../../src/policy/compile'
import { completionRequests, filterCompletionMessage, mayHoldCompletion, requestsWithId } from '../../src/policy/completion-filter'
import { Glob } from '../../src/glob'
import { UriTemplate, rfc6570Encode, sdkEncode } from '../../src/policy/uri-template'

type RuleSpec = Pick<PolicyRule, 'target' | 'effect'> & Partial<PolicyRule>

function policy(defaultEffect: Effect, rules: RuleSpec[]): PolicyConfig {
  return {
    default: defaultEffect,
    source: 'test',
    filterLists: true,
    rules: rules.map((r) => ({ identity: '*', tenant: null, method: 'resources/read', server: '*', ...r })),
  }
}

describe('RFC 6570 expansion (the spec’s own examples, §1.2 and §3.2)', () => {
  const values = new Map(
    Object.entries({ var: 'value', hello: 'Hello World!', path: '/foo/bar', x: '1024', y: '768', empty: '', half: '50%' }),
  )
  test.each([
    ['{var}', 'value'],
    ['{hello}', 'Hello%20World%21'],
    ['{half}', '50%25'],
    ['{+hello}', 'Hello%20World!'],
    ['{+half}', '50%25'],
    ['{+path}/here', '/foo/bar/here'],
    ['here?ref={+path}', 'here?ref=/foo/bar'],
    ['{#var}', '#value'],
    ['{#hello}', '#Hello%20World!'],
    ['map?{x,y}', 'map?1024,768'],
    ['{x,hello,y}', '1024,Hello%20World%21,768'],
    ['{+x,hello,y}', '1024,Hello%20World!,768'],
    ['{#x,hello,y}', '#1024,Hello%20World!,768'],
    ['X{.var}', 'X.value'],
    ['X{.x,y}', 'X.1024.768'],
    ['{/var}', '/value'],
    ['{/var,x}/here', '/value/1024/here'],
    ['{;x,y}', ';x=1024;y=768'],
    ['{;x,y,empty}', ';x=1024;y=768;empty'],
    ['{?x,y}', '?x=1024&y=768'],
    ['{?x,y,empty}', '?x=1024&y=768&empty='],
    ['?fixed=yes{&x}', '?fixed=yes&x=1024'],
    ['{var:3}', 'val'],
    ['{var:30}', 'value'],
    ['{/var*}', '/value'],
    ['a{ not an expression }b', 'a{ not an expression }b'],
  ])('%s → %s', (template, expected) => {
    expect(new UriTemplate(template).expand(values, rfc6570Encode)).toEqual([expected])
  })

  test('non-ASCII is UTF-8 in upper-case hex; the SDK’s encoding differs where the RFC keeps or escapes otherwise', () => {
    expect(new UriTemplate('{v}').expand(new Map([['v', 'é']]), rfc6570Encode)).toEqual(['%C3%A9'])
    expect(new UriTemplate('{v}').expand(new Map([['v', "it's"]]), rfc6570Encode)).toEqual(['it%27s'])
    expect(new UriTemplate('{v}').expand(new Map([['v', "it's"]]), sdkEncode)).toEqual(["it's"])
  })

  test('an expression with a variable nobody gave is a hole: the literal parts around it are returned', () => {
    const t = new UriTemplate('file:///{dir}/{name}.txt{?v}')
    expect(t.variables).toEqual(['dir', 'name', 'v'])
    expect(t.expand(new Map([['name', 'a']]), rfc6570Encode)).toEqual(['file:///', '/a.txt', ''])
    expect(
      t.expand(
        new Map([
          ['dir', 'd'],
          ['name', 'a'],
          ['v', '2'],
        ]),
        rfc6570Encode,
      ),
    ).toEqual(['file:///d/a.txt?v=2'])
  })
})

describe('Glob against a family of strings (literal parts with any text between them)', () => {
  test.each<[string, string[], boolean, boolean]>([
    // pattern, family, covers every, meets some
    ['*', ['a', 'b'], true, true],
    ['x://docs/*', ['x://docs/', ''], true, true],
    ['x://docs/*', ['x://', '/a'], false, true],
    ['x://docs/*', ['x://other/', ''], false, false],
    ['x://*.txt', ['x://d/', '.txt'], true, true],
    ['x://*.txt', ['x://d/', '.md'], false, false],
    ['x://*/secret', ['x://', '/secret'], true, true],
    ['x://a*b*c', ['x://a', 'c'], false, true],
    ['x://d/secret', ['x://d/', ''], false, true],
    ['x://d/secret', ['x://e/', ''], false, false],
  ])('%s and %j', (pattern, parts, covers, meets) => {
    const glob = new Glob(pattern)
    expect([glob.coversEvery(parts), glob.meetsSome(parts)]).toEqual([covers, meets])
  })
})

describe('completion values judged as the resources/read of the URI they complete', () => {
  const compiled = compilePolicy(
    policy('deny', [
      { target: 'x://notes/secret*', effect: 'deny' },
      { target: 'x://notes/*', effect: 'allow' },
      { target: 'x://files/private/*', effect: 'deny' },
      { target: 'x://files/*', effect: 'allow' },
    ]),
  )
  const allowed = (parts: readonly string[]): boolean => compiled.allowsEvery('bob', 'acme', 'resources/read', parts)
  const request = (uri: string, argument: string, context?: Record<string, string>, id: unknown = 1): Buffer =>
    Buffer.from(
      JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'completion/complete',
        params: {
          ref: { type: 'ref/resource', uri },
          argument: { name: argument, value: '' },
          ...(context ? { context: { arguments: context } } : {}),
        },
      }),
    )
  const answer = (values: unknown[], extra: Record<string, unknown> = {}, id: unknown = 1): string =>
    JSON.stringify({ jsonrpc: '2.0', id, result: { completion: { values, ...extra } } })
  const run = (
    body: Buffer | null,
    text: string,
  ): { values: unknown[]; total?: number; hasMore?: boolean; counts: unknown[]; same: boolean } => {
    const out = filterCompletionMessage(text, (id) => requestsWithId(completionRequests(body), id), allowed)
    const completion = (JSON.parse(out.text) as { result: { completion: { values: unknown[]; total?: number; hasMore?: boolean } } }).result
      .completion
    return { ...completion, counts: out.counts, same: out.text === text }
  }

  test('a value naming a denied resource is cut; total drops by as many, hasMore stays', () => {
    const out = run(request('x://notes/{id}', 'id'), answer(['a', 'secret1', 'b', 'secret2'], { total: 40, hasMore: true }))
    expect(out).toEqual({ values: ['a', 'b'], total: 38, hasMore: true, counts: [{ id: 1, hidden: 2, total: 4 }], same: false })
  })

  test('values past the 100 MCP allows in one answer are hidden unjudged', () => {
    const values = Array.from({ length: 150 }, (_, i) => `v${i}`)
    const out = run(request('x://notes/{id}', 'id'), answer(values, { total: 150, hasMore: false }))
    expect(out).toMatchObject({ values: values.slice(0, 100), total: 100, hasMore: false, counts: [{ id: 1, hidden: 50, total: 150 }] })
  })

  test('an answer where nothing is hidden keeps its exact bytes', () => {
    const text = answer(['a', 'b'], { total: 2 }).replace(',', ' , ')
    expect(run(request('x://notes/{id}', 'id'), text).same).toBe(true)
  })

  test('a key written with escapes is read as what it spells', () => {
    const text = answer(['a', 'secret1']).replace('"completion"', '"c\\u006fmpletion"').replace('"values"', '"v\\u0061lues"')
    expect(mayHoldCompletion(text)).toBe(true)
    expect(run(request('x://notes/{id}', 'id'), text).values).toEqual(['a'])
    // Escaped non-ASCII text alone (as Python's json.dumps writes it) does not make a list answer parse twice.
    expect(mayHoldCompletion('{"result":{"tools":[{"name":"caf\\u00e9"}]}}')).toBe(false)
  })

  test('the other variables come from context.arguments', () => {
    const body = (folder: string): Buffer => request('x://files/{folder}/{name}', 'name', { folder })
    expect(run(body('private'), answer(['a.txt', 'b.txt'])).values).toEqual([])
    expect(run(body('docs'), answer(['a.txt', 'b.txt'])).values).toEqual(['a.txt', 'b.txt'])
  })

  test('a variable nobody gave: a value is kept only if every URI it could name is allowed', () => {
    // Completing the folder: `private` names only denied URIs, `docs` only allowed ones.
    expect(run(request('x://files/{folder}/{name}', 'folder'), answer(['docs', 'private', 'privately'])).values).toEqual([
      'docs',
      'privately',
    ])
    // Completing the name without the folder: some folder (private) would be denied.
    expect(run(request('x://files/{folder}/{name}', 'name'), answer(['a.txt'])).values).toEqual([])
  })

  test('a value is judged under every encoding a client may use, and must expand to a URI the gateway would let it read', () => {
    // `secret x` encodes to secret%20x (denied by x://notes/secret*), a lone `..` to a dot segment.
    expect(run(request('x://notes/{+id}', 'id'), answer(['ok', 'secret x', '..', 'a/../secret', 'sub/ok'])).values).toEqual([
      'ok',
      'sub/ok',
    ])
  })

  test('values of an answer whose request is unknown, or not a string, or of a request without an argument name are hidden', () => {
    expect(run(null, answer(['a', 'b'])).values).toEqual([])
    expect(run(request('x://notes/{id}', 'id', undefined, 2), answer(['a'], {}, 3)).values).toEqual([])
    expect(run(request('x://notes/{id}', 'id'), answer(['a', 7])).values).toEqual(['a'])
  })

  test('a prompt completion is left alone, and ids match as a server reads them (1 and "1")', () => {
    const prompt = Buffer.from(
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'completion/complete',
        params: { ref: { type: 'ref/prompt', name: 'p' }, argument: { name: 'a', value: '' } },
      }),
    )
    expect(run(prompt, answer(['secret'])).same).toBe(true)
    expect(run(request('x://notes/{id}', 'id', undefined, '1'), answer(['a', 'secret'])).values).toEqual(['a'])
  })

  test('in a batch, each answer is judged against the request with its id', () => {
    const body = Buffer.from(
      JSON.stringify([
        JSON.parse(request('x://notes/{id}', 'id', undefined, 1).toString()),
        JSON.parse(request('x://files/{folder}/{name}', 'folder', undefined, 2).toString()),
      ]),
    )
    const text = `[${answer(['secret', 'a'], {}, 1)},${answer(['private', 'docs'], {}, 2)}]`
    const out = filterCompletionMessage(text, (id) => requestsWithId(completionRequests(body), id), allowed)
    const values = (JSON.parse(out.text) as Array<{ result: { completion: { values: string[] } } }>).map((m) => m.result.completion.values)
    expect(values).toEqual([['a'], ['docs']])
  })
})
