import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { didYouMean } from '../../src/config/did-you-mean'
import { runCli } from '../helpers/cli'
import { configProblems, tempDir } from '../helpers/harness'

/** An unknown config key gets the allowed key it was probably meant to be, at whatever level it is. */

const BASE = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'

describe('didYouMean', () => {
  test('typing slips find their key: a missing, extra, wrong or swapped letter', () => {
    const budget = ['limits', 'requests_per_window', 'window_seconds', 'tenants', 'tools', 'repeat_limit', 'on_store_error']
    expect(didYouMean('limts', budget)).toEqual(['limits'])
    expect(didYouMean('tennants', budget)).toEqual(['tenants'])
    expect(didYouMean('windows_seconds', budget)).toEqual(['window_seconds'])
    expect(didYouMean('reqeusts_per_window', budget)).toEqual(['requests_per_window'])
    expect(didYouMean('on_stroe_error', budget)).toEqual(['on_store_error'])
  })

  test('camelCase, kebab-case and capitals fold into the snake_case key', () => {
    const keys = ['window_seconds', 'max_body_bytes', 'filter_lists']
    expect(didYouMean('windowSeconds', keys)).toEqual(['window_seconds'])
    expect(didYouMean('max-body-bytes', keys)).toEqual(['max_body_bytes'])
    expect(didYouMean('Filter_Lists', keys)).toEqual(['filter_lists'])
  })

  test('a key that is simply wrong gets no guess, short keys included', () => {
    expect(didYouMean('teleport', ['budget_enforcement', 'postgres_storage'])).toEqual([])
    expect(didYouMean('tls', ['listen', 'token'])).toEqual([])
    expect(didYouMean('colour', ['listen', 'upstream', 'policy', 'audit'])).toEqual([])
    expect(didYouMean('ab', ['cd'])).toEqual([])
    expect(didYouMean('', ['a', 'listen'])).toEqual(['a'])
  })

  test('keys tied at the smallest distance are all offered, in their allowed order', () => {
    expect(didYouMean('mode', ['node', 'code', 'modes'])).toEqual(['node', 'code', 'modes'])
    expect(didYouMean('tool', ['tools', 'tool_x'])).toEqual(['tools'])
  })

  test('a long key is judged quickly: past the limit the distance stops early', () => {
    const allowed = ['listen', 'upstream', 'max_body_bytes']
    const started = process.hrtime.bigint()
    expect(didYouMean('x'.repeat(100_000), allowed)).toEqual([])
    expect(didYouMean(`${'a'.repeat(5000)}b`, [`${'a'.repeat(5000)}c`])).toEqual([`${'a'.repeat(5000)}c`])
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(2000)
  })
})

describe('in check-config and serve', () => {
  test('an unknown key at every level of wardline.yaml gets its "did you mean", with the allowed keys after it', () => {
    const found = configProblems(
      BASE +
        [
          'upstrem_timeout_seconds: 5',
          'features: { budget_enforcment: true }',
          'budget:',
          '  limts: [{ requests_per_window: 1, window_seconds: 60 }]',
          '  tools: { search: { requests_per_window: 1, windowSeconds: 60 } }',
          '  tenants: { acme: { requests_per_windw: 1, window_seconds: 60 } }',
          '  repeat_limit: { call: 3, window_seconds: 60 }',
          'audit: { output: stdout, retension_days: 3 }',
          'policy: { default: allow, filter_list: true, rules: [{ identity: "*", tol: x, effect: deny }] }',
          'postgres: { dns: "postgres://x" }',
        ].join('\n'),
      '/srv',
      {},
    )
    const unknown = found.filter((p) => p.includes('unknown key'))
    expect(unknown).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^upstrem_timeout_seconds: unknown key, did you mean upstream_timeout_seconds\? \(allowed: listen, /),
        'features.budget_enforcment: unknown key, did you mean budget_enforcement? (allowed: budget_enforcement, postgres_storage)',
        expect.stringMatching(/^budget\.limts: unknown key, did you mean limits\? \(allowed: /),
        expect.stringMatching(/^budget\.tools\.search\.windowSeconds: unknown key, did you mean window_seconds\? /),
        expect.stringMatching(/^budget\.tenants\.acme\.requests_per_windw: unknown key, did you mean requests_per_window\? /),
        expect.stringMatching(/^budget\.repeat_limit\.call: unknown key, did you mean calls\? /),
        expect.stringMatching(/^audit\.retension_days: unknown key, did you mean retention_days\? /),
        expect.stringMatching(/^policy\.filter_list: unknown key, did you mean filter_lists\? /),
        expect.stringMatching(/^policy\.rules\[0\]\.tol: unknown key, did you mean tool\? /),
        'postgres.dns: unknown key, did you mean dsn? (allowed: dsn, max_connections)',
      ]),
    )
    expect(unknown).toHaveLength(10)
  })

  test('a policy file gets it too, and check-config prints it', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'policy.yaml'), 'default: allow\nrules:\n  - { identity: alice, tool: x, efect: deny }\n')
    writeFileSync(join(dir, 'wardline.yaml'), `${BASE}policy_file: policy.yaml\naudit: { ouput: stdout }\n`)
    const r = runCli(['check-config', '--config', join(dir, 'wardline.yaml')])
    expect(r.code).toBe(1)
    const text = r.stdout + r.stderr
    expect(text).toContain(
      'audit.ouput: unknown key, did you mean output? (allowed: output, spill_file, max_queue_entries, retention_days)',
    )
    expect(text).toMatch(/rules\[0\]\.efect: unknown key, did you mean effect\? /)
  })
})
