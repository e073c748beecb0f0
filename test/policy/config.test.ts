import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseConfig } from '../../src/config/load'
import { configWarnings } from '../../src/config/warnings'
import { runCli } from '../helpers/cli'
import { configProblems, tempDir } from '../helpers/harness'

const BASE = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'

function problems(text: string, baseDir = '/srv'): string[] {
  return configProblems(text, baseDir)
}

const SERVERS =
  'servers:\n  docs: { url: http://127.0.0.1:3001/mcp }\n  tickets: { url: http://127.0.0.1:3002/mcp }\nauth: { mode: header }\n'

describe('policy rules scoped by server', () => {
  const rules = (...lines: string[]): string => `policy:\n  default: allow\n  rules:\n${lines.map((l) => `    - ${l}\n`).join('')}`

  test('server: is read as written, * when omitted', () => {
    const config = parseConfig(
      `${SERVERS}${rules('{ identity: a, tool: t, server: docs, effect: deny }', '{ identity: a, tool: t, server: "t*", effect: deny }', '{ identity: a, tool: t, effect: deny }')}`,
      { env: {}, baseDir: '/srv' },
    )
    expect(config.policy?.rules.map((r) => r.server)).toEqual(['docs', 't*', '*'])
    expect(configWarnings(config)).toEqual([])
  })

  test('with upstream: alone, anything but * is a config error; every one reported at once', () => {
    expect(problems(`${BASE}${rules('{ identity: a, tool: t, server: "*", effect: deny }')}`)).toEqual([])
    expect(
      problems(
        `${BASE}${rules('{ identity: a, tool: t, server: docs, effect: deny }', '{ identity: a, tool: t, effect: deny }', '{ identity: a, tool: t, server: "d*", effect: nope }')}`,
      ),
    ).toEqual([
      'policy.rules[2].effect: must be allow or deny',
      'policy.rules[0].server: is only used with servers: (with upstream: alone there is one server): remove the key or write *',
      'policy.rules[2].server: is only used with servers: (with upstream: alone there is one server): remove the key or write *',
    ])
  })

  test('with servers:, a name that is no server is a config error naming the closest; a glob that matches none is a warning', () => {
    expect(
      problems(
        `${SERVERS}${rules('{ identity: a, tool: t, server: dcos, effect: deny }', '{ identity: a, tool: t, server: wiki, effect: deny }', '{ identity: a, tool: t, server: Docs, effect: deny }')}`,
      ),
    ).toEqual([
      'policy.rules[0].server: names no server in servers:, did you mean docs? (servers: docs, tickets)',
      'policy.rules[1].server: names no server in servers: (servers: docs, tickets)',
      'policy.rules[2].server: names no server in servers:, did you mean docs? (servers: docs, tickets)',
    ])
    const config = parseConfig(`${SERVERS}${rules('{ identity: a, tool: t, server: "wiki-*", effect: deny }')}`, {
      env: {},
      baseDir: '/srv',
    })
    expect(configWarnings(config)).toEqual([
      'policy.rules[0].server: "wiki-*" matches no server in servers: (docs, tickets): the rule applies to no call',
    ])
  })

  test('a policy_file takes the same key; its problems name the file', () => {
    const dir = tempDir('wardline-policy-')
    writeFileSync(
      join(dir, 'p.yaml'),
      'default: allow\nrules:\n  - { identity: a, tool: t, server: tickets, effect: deny }\n  - { identity: a, tool: t, server: nope, effect: deny }\n',
    )
    expect(problems(`${SERVERS}policy_file: p.yaml\n`, dir)).toEqual([
      `${join(dir, 'p.yaml')}: rules[1].server: names no server in servers: (servers: docs, tickets)`,
    ])
    writeFileSync(join(dir, 'p.yaml'), 'default: allow\nrules:\n  - { identity: a, tool: t, server: tickets, effect: deny }\n')
    expect(parseConfig(`${SERVERS}policy_file: p.yaml\n`, { env: {}, baseDir: dir }).policy?.rules[0].server).toBe('tickets')
  })
})

describe('policy configuration', () => {
  test('no policy and no policy_file means no policy (every call allowed)', () => {
    expect(parseConfig(BASE, { env: {}, baseDir: '/srv' }).policy).toBeNull()
  })

  test('policy.filter_lists is a boolean, true unless turned off', () => {
    const off = parseConfig(`${BASE}policy:\n  default: deny\n  filter_lists: false\n`, { env: {}, baseDir: '/srv' })
    expect(off.policy?.filterLists).toBe(false)
    expect(problems(`${BASE}policy:\n  default: deny\n  filter_lists: sometimes\n`)).toEqual([
      expect.stringMatching(/^policy\.filter_lists: /),
    ])
  })

  test('an inline policy is read with its defaults: any tenant, method tools/call', () => {
    const config = parseConfig(
      `${BASE}policy:\n  default: deny\n  rules:\n    - { identity: ci-bot, tool: "read_*", effect: allow }\n    - { identity: "*", tenant: acme, method: "resources/*", tool: "*", effect: deny }\n`,
      { env: {}, baseDir: '/srv' },
    )
    expect(config.policy).toEqual({
      default: 'deny',
      source: 'inline',
      filterLists: true,
      rules: [
        { identity: 'ci-bot', tenant: null, method: 'tools/call', target: 'read_*', server: '*', effect: 'allow' },
        { identity: '*', tenant: 'acme', method: 'resources/*', target: '*', server: '*', effect: 'deny' },
      ],
    })
    expect(Object.isFrozen(config.policy?.rules[0])).toBe(true)
  })

  test('every problem in an inline policy is reported at once, each with its rule index', () => {
    const found = problems(
      [
        BASE + 'policy:',
        '  mode: strict',
        '  rules:',
        '    - { identity: a, tool: t, effect: allow }',
        '    - { identity: a, tool: t, effect: maybe }',
        '    - { identity: a, tool: t, effect: allow, method: tools/list }',
        '    - { identity: a, effect: deny, tenants: acme }',
        '    - { identity: "", tool: 7, effect: allow }',
        '    - just a string',
      ].join('\n'),
    )
    expect(found).toEqual([
      expect.stringMatching(/^policy\.mode: unknown key \(allowed: default, rules, filter_lists\)$/),
      'policy.default: is required (allow or deny)',
      'policy.rules[1].effect: must be allow or deny',
      expect.stringMatching(/^policy\.rules\[2\]\.method: must be one of tools\/call, resources\/list, .*, resources\/\*, prompts\/\*$/),
      'policy.rules[3].tenants: unknown key, did you mean tenant? (allowed: identity, tenant, method, tool, server, effect)',
      'policy.rules[3].tool: is required',
      'policy.rules[4].identity: must not be empty',
      'policy.rules[4].tool: must be a string',
      'policy.rules[5]: must be a mapping with identity, tool and effect',
    ])
  })

  test('a policy_file is read relative to the config file, and its problems name the file', () => {
    const dir = tempDir('wardline-policy-')
    writeFileSync(join(dir, 'good.yaml'), 'default: allow\nrules:\n  - { identity: intern, tool: expensive_tool, effect: deny }\n')
    writeFileSync(
      join(dir, 'bad.yaml'),
      'default: perhaps\nrules:\n  - { identity: a, tool: t }\n  - { identity: a, tool: t, effect: deny, method: prompts/fetch }\n',
    )

    const good = parseConfig(`${BASE}policy_file: good.yaml\n`, { env: {}, baseDir: dir })
    expect(good.policy).toEqual({
      default: 'allow',
      source: join(dir, 'good.yaml'),
      filterLists: true,
      rules: [{ identity: 'intern', tenant: null, method: 'tools/call', target: 'expensive_tool', server: '*', effect: 'deny' }],
    })

    const file = join(dir, 'bad.yaml')
    expect(problems(`${BASE}policy_file: bad.yaml\n`, dir)).toEqual([
      `${file}: default: must be allow or deny`,
      `${file}: rules[0].effect: is required`,
      expect.stringMatching(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: rules\\[1\\]\\.method: must be one of `)),
    ])
  })

  test('a missing or malformed policy_file, or both forms at once, is a clear problem', () => {
    const dir = tempDir('wardline-policy-')
    writeFileSync(join(dir, 'broken.yaml'), 'default: [allow\n')
    writeFileSync(join(dir, 'list.yaml'), '- default: allow\n')
    expect(problems(`${BASE}policy_file: nowhere.yaml\n`, dir)).toEqual([
      `policy_file: ${join(dir, 'nowhere.yaml')} cannot be read (ENOENT)`,
    ])
    expect(problems(`${BASE}policy_file: broken.yaml\n`, dir)).toEqual([
      expect.stringMatching(new RegExp(`^${join(dir, 'broken.yaml')}: not valid YAML: `)),
    ])
    expect(problems(`${BASE}policy_file: list.yaml\n`, dir)).toEqual([
      `${join(dir, 'list.yaml')}: must be a mapping with default and rules`,
    ])
    expect(problems(`${BASE}policy_file: x.yaml\npolicy: { default: allow }\n`, dir)).toEqual([
      'policy_file: cannot be used together with an inline policy: keep one of the two',
    ])
    expect(problems(`${BASE}policy: deny everything\n`)).toEqual(['policy: must be a mapping with default and rules'])
    // A blank value fails closed as a config error: read as "no policy" it would allow every call.
    expect(problems(`${BASE}policy_file:\n`)).toEqual([
      'policy_file: is empty: give the path of a policy file, or remove the key to run without a policy',
    ])
    expect(problems(`${BASE}policy:\n`)).toEqual(['policy: must be a mapping with default and rules'])
  })

  test('the shipped examples/policy.yaml is valid', () => {
    const config = parseConfig(`${BASE}policy_file: examples/policy.yaml\n`, { env: {}, baseDir: process.cwd() })
    expect(config.policy?.rules.some((rule) => rule.effect === 'deny')).toBe(true)
  })
})

describe('wardline check-config', () => {
  function checkConfig(file: string): { status: number | null; stdout: string; stderr: string } {
    const run = runCli(['check-config', '--config', file])
    return { status: run.code, stdout: run.stdout, stderr: run.stderr }
  }

  test('reports every policy problem with its rule index and exits 1', () => {
    const dir = tempDir('wardline-check-')
    const file = join(dir, 'wardline.yaml')
    writeFileSync(
      file,
      `${BASE}policy:\n  default: allow\n  rules:\n    - { identity: a, tool: t, effect: allow }\n    - { identity: a, tool: t, effect: nope }\n    - { identity: a, effect: deny }\n`,
    )
    const run = checkConfig(file)
    expect(run.status).toBe(1)
    expect(run.stderr).toContain(`${file}: 2 problems`)
    expect(run.stderr).toContain('policy.rules[1].effect: must be allow or deny')
    expect(run.stderr).toContain('policy.rules[2].tool: is required')
  })

  test('checks a policy_file too, and accepts a valid one', () => {
    const dir = tempDir('wardline-check-')
    const file = join(dir, 'wardline.yaml')
    writeFileSync(file, `${BASE}policy_file: policy.yaml\n`)
    writeFileSync(join(dir, 'policy.yaml'), 'default: deny\nrules:\n  - { identity: "svc-*", tool: "*", effect: allow }\n')
    expect(checkConfig(file)).toMatchObject({ status: 0, stdout: `${file}: ok\n` })

    writeFileSync(join(dir, 'policy.yaml'), 'default: deny\nrules:\n  - { identity: "svc-*", tool: "*", effect: alow }\n')
    const run = checkConfig(file)
    expect(run.status).toBe(1)
    expect(run.stderr).toContain(`${join(dir, 'policy.yaml')}: rules[0].effect: must be allow or deny`)
  })
})
