/**
 * Red team (config "did you mean …?"): check-config run by the real CLI on files made to
 * hurt it: many long unknown keys (CPU), a misspelt secret key (its value must not be echoed), and an
 * unknown key holding terminal escape sequences (its name is printed: it must not drive the terminal).
 */
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cliMain, runCli } from '../helpers/cli'
import { tempDir } from '../helpers/harness'

const BASE = ['upstream: http://127.0.0.1:3001', 'listen: 127.0.0.1:8080', 'auth:', '  mode: header']

function file(lines: readonly string[]): string {
  const path = join(tempDir(), 'wardline.yaml')
  writeFileSync(path, `${lines.join('\n')}\n`)
  return path
}

test('20,000 unknown keys as long as the longest allowed ones, each a few edits off, are all reported within seconds', () => {
  const keys: string[] = []
  for (let i = 0; i < 20_000; i++) keys.push(`max_concurrent_per_identit${String(i).padStart(5, 'x')}: 1`)
  const path = file([...BASE, ...keys])
  const started = performance.now()
  // Every problem lists the allowed keys: about 10 MB of stderr, past runCli's 1 MB buffer.
  const r = spawnSync(process.execPath, [cliMain(), 'check-config', '--config', path], {
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    timeout: 20_000,
  })
  const seconds = (performance.now() - started) / 1000
  const stderr = r.stderr
  expect(r.status).toBe(1)
  expect(stderr.split('\n')[0]).toBe(`${path}: 20000 problems`)
  expect(seconds).toBeLessThan(15)
})

test('a misspelt secret key gets its guess, and its value is never printed', () => {
  const path = file([...BASE.slice(0, 2), 'auth:', '  mode: jwt', '  jwt:', '    secrte: "s3cr3t-value-that-must-not-show-0123456789"'])
  const { code, stderr } = runCli(['check-config', '--config', path])
  expect(code).toBe(1)
  expect(stderr).toContain('auth.jwt.secrte: unknown key, did you mean secret?')
  expect(stderr).not.toContain('s3cr3t-value')
})

test('an unknown key holding terminal escape sequences is printed escaped, never raw', () => {
  const path = file([...BASE, '"liste\\e[2J\\e]0;pwned\\a": 1'])
  const { code, stderr } = runCli(['check-config', '--config', path])
  expect(code).toBe(1)
  // eslint-disable-next-line no-control-regex
  expect(stderr).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/)
  expect(stderr).toContain('liste\\x1b[2J\\x1b]0;pwned\\x07: unknown key')
})
