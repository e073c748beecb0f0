import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { parseConfig } from '../../src/config/load'

/**
 * Config load time: wardline.yaml, examples/wardline.postgres.yaml and a large file (500 tenants,
 * 500 tools, 500 policy rules) each parsed 1000 times; prints the median and p95 of one load in ms.
 * Run from the repository root: npx tsc --outDir .bench-out --module commonjs --target es2022 --esModuleInterop --skipLibCheck test/config/load-time.bench.ts && node .bench-out/test/config/load-time.bench.js
 */
const root = process.cwd()
const env = { WARDLINE_JWT_SECRET: 'a-test-secret-that-is-long-enough-for-hs256', WARDLINE_POSTGRES_DSN: 'postgres://w@127.0.0.1:5432/w' }
const lines = ['upstream: http://127.0.0.1:3001', 'auth: { mode: jwt, jwt: { secret: "${WARDLINE_JWT_SECRET}" } }', 'budget:', '  tenants:']
for (let i = 0; i < 500; i++) lines.push(`    t${i}: { requests_per_window: ${i + 1}, window_seconds: 60 }`)
lines.push('  tools:')
for (let i = 0; i < 500; i++)
  lines.push(
    `    tool${i}: { limits: [{ requests_per_window: 5, window_seconds: 1 }, { requests_per_window: 50, window_seconds: 60 }], cost: 2 }`,
  )
lines.push('policy:', '  default: deny', '  rules:')
for (let i = 0; i < 500; i++) lines.push(`    - { identity: "user${i}", tenant: "t${i}", tool: "tool${i}", effect: allow }`)
const files: Array<[string, string]> = [
  ['wardline.yaml', readFileSync(join(root, 'wardline.yaml'), 'utf8')],
  ['examples/wardline.postgres.yaml', readFileSync(join(root, 'examples/wardline.postgres.yaml'), 'utf8')],
  ['large (500 tenants, 500 tools, 500 rules)', `${lines.join('\n')}\n`],
]
for (const [name, text] of files) {
  const runs = name.startsWith('large') ? 200 : 1000
  for (let i = 0; i < 50; i++) parseConfig(text, { env, baseDir: root })
  const times: number[] = []
  for (let i = 0; i < runs; i++) {
    const t = performance.now()
    parseConfig(text, { env, baseDir: root })
    times.push(performance.now() - t)
  }
  times.sort((a, b) => a - b)
  console.log(`${name}: median ${times[runs >> 1].toFixed(3)} ms, p95 ${times[Math.floor(runs * 0.95)].toFixed(3)} ms (${runs} loads)`)
}
