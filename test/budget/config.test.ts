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
      requestsPerWindow: 100,
      windowSeconds: 60,
      tenants: { acme: { requestsPerWindow: 1000, windowSeconds: 60 } },
      tools: { expensive_tool: { requestsPerWindow: 10, windowSeconds: 60 } },
      checkTimeoutSeconds: 5,
      onStoreError: 'open',
    })
  })

  test('without a budget block the defaults apply and the block counts as absent', () => {
    const config = parseConfig(BASE, { env: {}, baseDir: '/srv' })
    expect(config.budget).toMatchObject({ configured: false, requestsPerWindow: 100, windowSeconds: 60, onStoreError: 'open' })
    expect(config.features.budgetEnforcement).toBe(false)
  })

  test('fractional windows are allowed, so tests and demos can use short ones', () => {
    expect(parseConfig(BASE + 'budget: { window_seconds: 0.5 }', { env: {}, baseDir: '/srv' }).budget.windowSeconds).toBe(0.5)
  })

  test('every bad value is reported with its key path', () => {
    const found = problems(
      [
        'budget:',
        '  requests_per_window: 0',
        '  window_seconds: 86401',
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
})
