import { loadConfig } from '../../src/config/load'
import type { Effect, PolicyConfig, PolicyRule } from '../../src/config/types'
import { compilePolicy } from '../../src/policy/compile'
import { Glob } from '../../src/glob'

type RuleSpec = Partial<PolicyRule> & Pick<PolicyRule, 'identity' | 'target' | 'effect'>

function policy(defaultEffect: Effect, rules: RuleSpec[]): PolicyConfig {
  return {
    default: defaultEffect,
    source: 'test',
    filterLists: true,
    rules: rules.map((r) => ({ tenant: null, method: 'tools/call', server: '*', ...r })),
  }
}

/** What a call gets: the effect and which rule decided (-1: the default). */
function decide(p: PolicyConfig, identity: string, tenant: string, method: string, target: string): [Effect, number] {
  const compiled = compilePolicy(p)
  const index = compiled.match(identity, tenant, method, target)
  return [compiled.effectOf(index), index]
}

describe('policy evaluation', () => {
  test('the first matching rule wins, even when a later rule is more specific', () => {
    const p = policy('allow', [
      { identity: 'ci-*', target: '*', effect: 'deny' },
      { identity: 'ci-bot', target: 'echo', effect: 'allow' },
      { identity: 'ci-bot', target: 'add', effect: 'allow' },
    ])
    expect(decide(p, 'ci-bot', 'acme', 'tools/call', 'echo')).toEqual(['deny', 0])
    expect(decide(p, 'alice', 'acme', 'tools/call', 'echo')).toEqual(['allow', -1])

    const reversed = policy('deny', [p.rules[1], p.rules[2], p.rules[0]])
    expect(decide(reversed, 'ci-bot', 'acme', 'tools/call', 'echo')).toEqual(['allow', 0])
    expect(decide(reversed, 'ci-bot', 'acme', 'tools/call', 'add')).toEqual(['allow', 1])
    expect(decide(reversed, 'ci-bot', 'acme', 'tools/call', 'whoami')).toEqual(['deny', 2])
  })

  test('a tenant-scoped rule gives the same identity two outcomes in two tenants', () => {
    const p = policy('deny', [
      { identity: 'alice', tenant: 'acme', target: 'search', effect: 'allow' },
      { identity: 'alice', tenant: 'globex', target: 'search', effect: 'deny' },
      { identity: 'alice', target: 'search', effect: 'allow' },
    ])
    expect(decide(p, 'alice', 'acme', 'tools/call', 'search')).toEqual(['allow', 0])
    expect(decide(p, 'alice', 'globex', 'tools/call', 'search')).toEqual(['deny', 1])
    expect(decide(p, 'alice', 'initech', 'tools/call', 'search')).toEqual(['allow', 2])
  })

  test('rules apply to their method only: a tools/call wildcard does not match resources/read', () => {
    const p = policy('deny', [
      { identity: '*', target: '*', effect: 'allow' },
      { identity: '*', method: 'prompts/get', target: 'greeting', effect: 'allow' },
      { identity: '*', method: 'resources/*', target: 'example://*', effect: 'allow' },
    ])
    expect(decide(p, 'bob', 'acme', 'tools/call', 'anything')).toEqual(['allow', 0])
    expect(decide(p, 'bob', 'acme', 'resources/read', 'file:///etc/passwd')).toEqual(['deny', -1])
    expect(decide(p, 'bob', 'acme', 'resources/read', 'example://readme')).toEqual(['allow', 2])
    expect(decide(p, 'bob', 'acme', 'resources/subscribe', 'example://readme')).toEqual(['allow', 2])
    expect(decide(p, 'bob', 'acme', 'prompts/get', 'greeting')).toEqual(['allow', 1])
    expect(decide(p, 'bob', 'acme', 'prompts/list', '')).toEqual(['deny', -1])
  })

  test('method "*" covers every gated method, and a family covers methods no rule can name', () => {
    const p = policy('allow', [
      { identity: 'mallory', method: '*', target: '*', effect: 'deny' },
      { identity: 'eve', method: 'prompts/*', target: '*', effect: 'deny' },
    ])
    for (const method of ['tools/call', 'resources/list', 'resources/templates/list', 'prompts/get', 'resources/future']) {
      expect(decide(p, 'mallory', 'acme', method, 'x')).toEqual(['deny', 0])
    }
    expect(decide(p, 'eve', 'acme', 'prompts/someday', 'x')).toEqual(['deny', 1])
    expect(decide(p, 'eve', 'acme', 'resources/someday', 'x')).toEqual(['allow', -1])
  })

  test('a "*" target matches list calls, which carry no target; a partial glob does not', () => {
    const p = policy('allow', [
      { identity: '*', method: 'resources/list', target: 'example*', effect: 'allow' },
      { identity: '*', method: 'resources/list', target: '*', effect: 'deny' },
    ])
    expect(decide(p, 'bob', 'acme', 'resources/list', '')).toEqual(['deny', 1])
  })

  test('the default applies when no rule matches, allow or deny', () => {
    const rules: RuleSpec[] = [{ identity: 'alice', target: 'echo', effect: 'deny' }]
    expect(decide(policy('allow', rules), 'bob', 'acme', 'tools/call', 'echo')).toEqual(['allow', -1])
    expect(decide(policy('deny', rules), 'bob', 'acme', 'tools/call', 'echo')).toEqual(['deny', -1])
    expect(decide(policy('deny', []), 'bob', 'acme', 'prompts/get', 'greeting')).toEqual(['deny', -1])
  })

  test('names with regex and glob-like characters are literal; only * is a wildcard', () => {
    const p = policy('deny', [
      { identity: 'a.b+c', target: 'read_(file)?', effect: 'allow' },
      { identity: '*', target: 'files[0-9]', effect: 'allow' },
      { identity: '*', target: '^$.|?+\\(){}', effect: 'allow' },
      { identity: 'svc-*', target: '*.get', effect: 'allow' },
    ])
    expect(decide(p, 'a.b+c', 'acme', 'tools/call', 'read_(file)?')[0]).toBe('allow')
    expect(decide(p, 'aXb+c', 'acme', 'tools/call', 'read_(file)?')[0]).toBe('deny')
    expect(decide(p, 'a.bbc', 'acme', 'tools/call', 'read_(file)?')[0]).toBe('deny')
    expect(decide(p, 'a.b+c', 'acme', 'tools/call', 'read_')[0]).toBe('deny')
    expect(decide(p, 'x', 'acme', 'tools/call', 'files[0-9]')[0]).toBe('allow')
    expect(decide(p, 'x', 'acme', 'tools/call', 'files5')[0]).toBe('deny')
    expect(decide(p, 'x', 'acme', 'tools/call', '^$.|?+\\(){}')[0]).toBe('allow')
    expect(decide(p, 'svc-a', 'acme', 'tools/call', 'user.get')[0]).toBe('allow')
    expect(decide(p, 'svc-a', 'acme', 'tools/call', 'userXget')[0]).toBe('deny')
    expect(decide(p, 'svc-\n', 'acme', 'tools/call', '\n.get')[0]).toBe('allow')
  })
})

describe('glob patterns', () => {
  test.each([
    ['*', '', true],
    ['**', 'anything', true],
    ['read_*', 'read_', true],
    ['read_*', 'read_file', true],
    ['read_*', 'xread_file', false],
    ['*_file', 'read_file', true],
    ['a*a', 'a', false],
    ['a*a', 'aa', true],
    ['ab*ba', 'aba', false],
    ['*ab*ab*', 'abab', true],
    ['*ab*ab*', 'aabb', false],
    ['x*y*z', 'xzyz', true],
    ['x*y*z', 'xzzy', false],
    ['*.*', 'a.b', true],
    ['*.*', 'ab', false],
    ['read', 'read', true],
    ['read', 'Read', false],
  ])('%j matches %j: %s', (pattern, text, expected) => {
    expect(new Glob(pattern).matches(text)).toBe(expected)
  })

  test('a pathological pattern on a long name answers at once (no backtracking blow-up)', () => {
    const glob = new Glob('*a*a*a*a*a*a*a*a*b')
    const started = performance.now()
    expect(glob.matches('a'.repeat(200_000))).toBe(false)
    expect(performance.now() - started).toBeLessThan(1000)
  })
})

describe('compiled lookup', () => {
  /** A deterministic generator, so a failure reproduces. */
  function random(seed: number): () => number {
    let s = seed >>> 0
    return () => {
      s = (s + 0x6d2b79f5) >>> 0
      let t = s
      t = Math.imul(t ^ (t >>> 15), t | 1)
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
  }

  /** The plain reading of the spec: try each rule in order. */
  function reference(p: PolicyConfig, identity: string, tenant: string, method: string, target: string): number {
    return p.rules.findIndex((rule) => {
      const methodOk =
        rule.method === '*' || rule.method === method || (rule.method.endsWith('/*') && method.startsWith(rule.method.slice(0, -1)))
      return (
        methodOk &&
        new Glob(rule.identity).matches(identity) &&
        (rule.tenant === null || new Glob(rule.tenant).matches(tenant)) &&
        new Glob(rule.target).matches(target)
      )
    })
  }

  test('answers exactly like trying the rules in order, over thousands of random policies and calls', () => {
    const next = random(20250705)
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]
    const identities = ['alice', 'bob', 'ci-bot', 'svc-a', 'svc-b', '']
    const tenants = ['acme', 'globex', 'default']
    const targets = ['echo', 'read_file', 'read_dir', 'write_file', 'example://readme', 'greeting', '']
    const methods = ['tools/call', 'resources/read', 'resources/list', 'prompts/get', 'prompts/list', 'resources/future']
    const identityPatterns = [...identities.filter(Boolean), '*', 'svc-*', '*-bot', 'a*e']
    const tenantPatterns = [null, null, ...tenants, 'g*', '*']
    const targetPatterns = [...targets.filter(Boolean), '*', 'read_*', '*_file', 'example://*', '*e*']
    const methodPatterns = ['tools/call', 'tools/call', 'resources/read', 'resources/list', 'prompts/get', '*', 'resources/*', 'prompts/*']
    let checked = 0
    for (let round = 0; round < 300; round++) {
      const rules: RuleSpec[] = []
      const count = 1 + Math.floor(next() * 40)
      for (let i = 0; i < count; i++) {
        rules.push({
          identity: pick(identityPatterns),
          tenant: pick(tenantPatterns),
          method: pick(methodPatterns),
          target: pick(targetPatterns),
          effect: next() < 0.5 ? 'allow' : 'deny',
        })
      }
      const p = policy(next() < 0.5 ? 'allow' : 'deny', rules)
      const compiled = compilePolicy(p)
      for (let c = 0; c < 40; c++) {
        const call = [pick(identities), pick(tenants), pick(methods), pick(targets)] as const
        expect([call, compiled.match(...call)]).toEqual([call, reference(p, ...call)])
        checked++
      }
    }
    expect(checked).toBe(12_000)
  })

  test('the shipped wardline.yaml policy allows the demo caller and denies what its comments say', () => {
    const config = loadConfig('wardline.yaml', {})
    expect(config.policy).not.toBeNull()
    const compiled = compilePolicy(config.policy as PolicyConfig)
    const effect = (identity: string, tenant: string, method: string, target: string): Effect =>
      compiled.effectOf(compiled.match(identity, tenant, method, target))
    for (const tool of ['echo', 'add', 'whoami', 'count_slowly', 'expensive_tool'])
      expect(effect('alice', 'acme', 'tools/call', tool)).toBe('allow')
    expect(effect('alice', 'acme', 'resources/read', 'example://readme')).toBe('allow')
    expect(effect('alice', 'acme', 'prompts/get', 'greeting')).toBe('allow')
    expect(effect('alice', 'guest', 'tools/call', 'expensive_tool')).toBe('deny')
    expect(effect('intern-sam', 'acme', 'resources/list', '')).toBe('deny')
  })
})

describe('a policy compiled for one server', () => {
  const p = policy('allow', [
    { identity: 'alice', target: 'echo', server: 'docs', effect: 'deny' },
    { identity: '*', target: 'add', server: 'd*', effect: 'deny' },
    { identity: 'alice', target: 'echo', effect: 'allow' },
    { identity: '*', method: 'resources/read', target: 'file:///*', server: 'tickets', effect: 'deny' },
  ])

  test('judges by the rules whose server covers it, keeping the rule indexes of the whole set', () => {
    const docs = compilePolicy(p, 'docs')
    const tickets = compilePolicy(p, 'tickets')
    const dev = compilePolicy(p, 'dev')
    expect(docs.match('alice', '', 'tools/call', 'echo')).toBe(0)
    expect(tickets.match('alice', '', 'tools/call', 'echo')).toBe(2)
    expect(docs.match('bob', '', 'tools/call', 'add')).toBe(1)
    expect(dev.match('bob', '', 'tools/call', 'add')).toBe(1)
    expect(tickets.match('bob', '', 'tools/call', 'add')).toBe(-1)
    expect(tickets.match('bob', '', 'resources/read', 'file:///x')).toBe(3)
    expect(docs.match('bob', '', 'resources/read', 'file:///x')).toBe(-1)
  })

  test('the one upstream (no name) is covered by * alone', () => {
    const upstream = compilePolicy(p)
    expect(upstream.match('alice', '', 'tools/call', 'echo')).toBe(2)
    expect(upstream.match('bob', '', 'tools/call', 'add')).toBe(-1)
  })

  test('allowsEvery and canDeny read only the rules that cover the server', () => {
    expect(compilePolicy(p, 'tickets').allowsEvery('bob', '', 'resources/read', ['file:///', ''])).toBe(false)
    expect(compilePolicy(p, 'docs').allowsEvery('bob', '', 'resources/read', ['file:///', ''])).toBe(true)
    const docsOnly = policy('allow', [{ identity: '*', target: '*', server: 'docs', effect: 'deny' }])
    expect(compilePolicy(docsOnly, 'docs').canDeny).toBe(true)
    expect(compilePolicy(docsOnly, 'tickets').canDeny).toBe(false)
  })
})
