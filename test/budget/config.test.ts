import { parseConfig } from '../../src/config/load'
import { configProblems } from '../helpers/harness'

const BASE = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'

function problems(text: string): string[] {
  return configProblems(BASE + text)
}

describe('budget configuration', () => {
  test('the block from the docs reads as written, with the defaults beside it', () => {
    const config = parseConfig(
      BASE +
        [
          'features:',
          '  budget_enforcement: true',
          'budget:',
          '  requests_per_window: 100',
          '  window_seconds: 60',
          '  tenants:',
          '    acme:',
          '      requests_per_window: 1000',
          '      window_seconds: 60',
          '  tools:',
          '    expensive_tool:',
          '      requests_per_window: 10',
          '      window_seconds: 60',
        ].join('\n'),
      { env: {}, baseDir: '/srv' },
    )
    expect(config.features.budgetEnforcement).toBe(true)
    expect(config.budget).toEqual({
      configured: true,
      limits: [{ requestsPerWindow: 100, windowSeconds: 60 }],
      tenants: { acme: [{ requestsPerWindow: 1000, windowSeconds: 60 }] },
      tools: { expensive_tool: { limits: [{ requestsPerWindow: 10, windowSeconds: 60 }], cost: 1, server: null, tool: 'expensive_tool' } },
      servers: {},
      repeatLimit: null,
      checkTimeoutSeconds: 5,
      onStoreError: 'open',
    })
  })

  test('without a budget block the defaults apply and the block counts as absent', () => {
    const config = parseConfig(BASE, { env: {}, baseDir: '/srv' })
    expect(config.budget).toMatchObject({
      configured: false,
      limits: [{ requestsPerWindow: 100, windowSeconds: 60 }],
      onStoreError: 'open',
    })
    expect(config.features.budgetEnforcement).toBe(false)
  })

  test('fractional windows are allowed, so tests and demos can use short ones', () => {
    expect(parseConfig(BASE + 'budget: { window_seconds: 0.5 }', { env: {}, baseDir: '/srv' }).budget.limits[0].windowSeconds).toBe(0.5)
  })

  test('every bad value is reported with its key path', () => {
    const found = problems(
      [
        'budget:',
        '  requests_per_window: 0',
        '  window_seconds: 2678401',
        '  on_store_error: maybe',
        '  tenants:',
        '    acme: { requests_per_window: 2.5, window_seconds: 60 }',
        '    "": { requests_per_window: 1, window_seconds: 1 }',
        '  tools:',
        '    search: { requests_per_window: 1, window_seconds: 0, tools: {} }',
      ].join('\n'),
    )
    expect(found).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^budget\.requests_per_window: /),
        expect.stringMatching(/^budget\.window_seconds: /),
        expect.stringMatching(/^budget\.on_store_error: /),
        expect.stringMatching(/^budget\.tenants\.acme\.requests_per_window: /),
        'budget.tenants: names must not be empty',
        expect.stringMatching(/^budget\.tools\.search\.window_seconds: /),
        expect.stringMatching(/^budget\.tools\.search\.tools: unknown key/),
      ]),
    )
    expect(found).toHaveLength(7)
  })

  test('limits lists several windows per bucket, up to 31 days, and an override inherits the whole list', () => {
    const config = parseConfig(
      BASE +
        [
          'budget:',
          '  limits:',
          '    - { requests_per_window: 60, window_seconds: 60 }',
          '    - { requests_per_window: 1000, window_seconds: 86400 }',
          '  tenants:',
          '    acme: {}',
          '    globex: { limits: [{ requests_per_window: 50000, window_seconds: 2678400 }] }',
          '  tools:',
          '    generate_report: { cost: 10 }',
          '    search: { requests_per_window: 5, window_seconds: 1, cost: 2 }',
          '  repeat_limit: { calls: 3, window_seconds: 300 }',
        ].join('\n'),
      { env: {}, baseDir: '/srv' },
    )
    const day = [
      { requestsPerWindow: 60, windowSeconds: 60 },
      { requestsPerWindow: 1000, windowSeconds: 86400 },
    ]
    expect(config.budget).toMatchObject({
      limits: day,
      tenants: { acme: day, globex: [{ requestsPerWindow: 50000, windowSeconds: 2678400 }] },
      tools: {
        // cost alone: no bucket of its own
        generate_report: { limits: [], cost: 10 },
        search: { limits: [{ requestsPerWindow: 5, windowSeconds: 1 }], cost: 2 },
      },
      repeatLimit: { calls: 3, windowSeconds: 300 },
    })
  })

  test('every problem with limits, cost and repeat_limit is reported with its path', () => {
    const found = problems(
      [
        'budget:',
        '  limits:',
        '    - { requests_per_window: 60, window_seconds: 60 }',
        '    - { requests_per_window: 70, window_seconds: 60 }',
        '    - { requests_per_window: 5 }',
        '  tenants:',
        '    acme: { limits: [], requests_per_window: 4 }',
        '    globex: { window_seconds: 30 }',
        '  tools:',
        '    search: { cost: 0 }',
        '    fetch: { cost: 1.5, limits: { requests_per_window: 1 } }',
        '  repeat_limit: { calls: 3 }',
      ].join('\n'),
    )
    expect(found).toEqual(
      expect.arrayContaining([
        'budget.limits[1].window_seconds: 60 is listed twice',
        'budget.limits[2]: must set requests_per_window and window_seconds',
        'budget.tenants.acme: set either limits or requests_per_window / window_seconds, not both',
        'budget.tenants.acme.limits: must list at least one window',
        expect.stringMatching(/^budget\.tenants\.globex: must set both requests_per_window and window_seconds/),
        expect.stringMatching(/^budget\.tools\.search\.cost: /),
        expect.stringMatching(/^budget\.tools\.fetch\.cost: /),
        'budget.tools.fetch.limits: must be a list',
        'budget.repeat_limit: must set calls and window_seconds',
      ]),
    )
    expect(found).toHaveLength(9)
  })
})
