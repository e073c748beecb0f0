import { spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT } from '../helpers/cli'
import { tempDir } from '../helpers/harness'
import { findPromtool } from './obs-promtool'

/** Where the alert-rule tests get promtool, and when its absence fails them instead of skipping them. */
function fakePromtool(mode: number): string {
  const dir = tempDir()
  const file = join(dir, 'promtool')
  writeFileSync(file, '#!/bin/sh\n')
  chmodSync(file, mode)
  return dir
}

test('without promtool on a developer machine the tests are skipped, with what to do', () => {
  const found = findPromtool({ PATH: tempDir() })
  expect(found).toMatchObject({ path: null, required: false })
  expect(found.why).toContain('.ci/promtool')
})

test('in CI (CI=true or WARDLINE_REQUIRE_PROMTOOL=1) a missing promtool is required, so the tests fail', () => {
  for (const env of [{ CI: 'true' }, { CI: '1' }, { WARDLINE_REQUIRE_PROMTOOL: '1' }]) {
    expect(findPromtool({ PATH: tempDir(), ...env })).toMatchObject({ path: null, required: true })
  }
  expect(findPromtool({ PATH: tempDir(), CI: 'false' }).required).toBe(false)
})

test('PROMTOOL wins over PATH, and one naming no executable fails rather than skips', () => {
  const onPath = fakePromtool(0o755)
  const named = join(fakePromtool(0o755), 'promtool')
  expect(findPromtool({ PATH: onPath, PROMTOOL: named })).toEqual({ path: named, required: true, why: '' })
  const notExecutable = join(fakePromtool(0o644), 'promtool')
  const refused = findPromtool({ PATH: onPath, PROMTOOL: notExecutable })
  expect(refused).toMatchObject({ path: null, required: true })
  expect(refused.why).toContain('not an executable file')
})

test('the first executable promtool on PATH is found; a non-executable file named so is passed over', () => {
  const skipped = fakePromtool(0o644)
  const used = fakePromtool(0o755)
  expect(findPromtool({ PATH: `${skipped}:${used}` })).toEqual({ path: join(used, 'promtool'), required: false, why: '' })
})

describe('.ci/promtool, which fetches one for CI and developers (the suite itself never does)', () => {
  const script = join(ROOT, '.ci', 'promtool')
  const run = (env: Record<string, string>) => spawnSync('/bin/bash', [script], { env, encoding: 'utf8', timeout: 20_000 })

  test('prints PROMTOOL, or the promtool on PATH, or the cached one, and fetches nothing then', () => {
    const named = join(fakePromtool(0o755), 'promtool')
    expect(run({ PATH: tempDir(), HOME: tempDir(), PROMTOOL: named })).toMatchObject({ status: 0, stdout: `${named}\n` })
    const onPath = fakePromtool(0o755)
    expect(run({ PATH: onPath, HOME: tempDir() })).toMatchObject({ status: 0, stdout: `${join(onPath, 'promtool')}\n` })
    const cache = tempDir()
    mkdirSync(join(cache, 'wardline', 'prometheus', 'usr', 'bin'), { recursive: true })
    const cached = join(cache, 'wardline', 'prometheus', 'usr', 'bin', 'promtool')
    writeFileSync(cached, '#!/bin/sh\n')
    chmodSync(cached, 0o755)
    expect(run({ PATH: tempDir(), HOME: tempDir(), XDG_CACHE_HOME: cache })).toMatchObject({ status: 0, stdout: `${cached}\n` })
  })

  test('a PROMTOOL naming no executable, or no promtool and no apt, is exit 1 with what to do', () => {
    const bad = run({ PATH: tempDir(), HOME: tempDir(), PROMTOOL: join(tempDir(), 'nope') })
    expect(bad.status).toBe(1)
    expect(bad.stderr).toContain('is not an executable file')
    const noApt = run({ PATH: tempDir(), HOME: tempDir() })
    expect(noApt).toMatchObject({ status: 1, stdout: '' })
    expect(noApt.stderr).toContain('put one on PATH or set PROMTOOL')
  })
})
