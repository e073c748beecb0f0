import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { loadConfig, parseConfig } from '../../src/config/load'
import { ROOT } from '../helpers/cli'

/**
 * Every config file the project ships or documents keeps loading, to the same Config: wardline.yaml,
 * the examples, and each YAML block of the docs that is wardline.yaml or a piece of it (a piece is laid
 * over a minimal file, as an operator would paste it). The expected values were taken from the loader
 * before the declarative schema replaced the readers' own key lists; regenerate the fixture only on
 * purpose: WARDLINE_UPDATE_EXAMPLES=1 npx jest test/config/examples.test.ts
 */

const FIXTURE = join(__dirname, 'fixtures', 'examples-loaded.json')
const SECRET = 'a-test-secret-that-is-long-enough-for-hs256'
const DSN = 'postgres://wardline@127.0.0.1:5432/wardline'
const ENV = {
  WARDLINE_JWT_SECRET: SECRET,
  WARDLINE_POSTGRES_DSN: DSN,
  WARDLINE_ADMIN_TOKEN: 'c'.repeat(48),
}
const BASE = { upstream: 'http://127.0.0.1:3001', auth: { mode: 'jwt', jwt: { secret: SECRET } }, audit: { output: 'stdout' } }

/** A loaded Config as plain JSON, with the checkout's own path written as <root> so the fixture travels. */
function portable(config: unknown): unknown {
  return JSON.parse(JSON.stringify(config).split(ROOT).join('<root>'))
}

function shippedFiles(): string[] {
  const files = [join(ROOT, 'wardline.yaml'), ...readdirSync(join(ROOT, 'examples')).map((f) => join(ROOT, 'examples', f))]
  return files.filter((f) => /\.ya?ml$/.test(f) && /\bupstream:/.test(readFileSync(f, 'utf8')))
}

/** The docs' YAML blocks that name a key of wardline.yaml: whole files alone, pieces over BASE. */
function documentedBlocks(): Array<[string, string]> {
  const out: Array<[string, string]> = []
  for (const file of ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`)].filter((f) => f.endsWith('.md'))) {
    const text = readFileSync(join(ROOT, file), 'utf8')
    let index = 0
    for (const m of text.matchAll(/^```ya?ml\n([\s\S]*?)^```/gm)) {
      index += 1
      const tree = yaml.load(m[1], { schema: yaml.CORE_SCHEMA })
      if (tree === null || typeof tree !== 'object' || Array.isArray(tree)) continue
      const keys = Object.keys(tree)
      if (
        !keys.some((k) =>
          [
            'upstream',
            'auth',
            'budget',
            'policy',
            'policy_file',
            'features',
            'admin',
            'tls',
            'allowed_origins',
            'postgres',
            'audit',
          ].includes(k),
        )
      )
        continue
      if ('rules' in tree && !('upstream' in tree)) continue // a policy file's content
      const whole = 'upstream' in tree
      // A piece that names servers replaces the minimal file's upstream (the two cannot both be set).
      const { upstream: _upstream, ...withoutUpstream } = structuredClone(BASE)
      out.push([
        `${file} block ${index}`,
        whole ? m[1] : yaml.dump({ ...('servers' in tree ? withoutUpstream : structuredClone(BASE)), ...tree }),
      ])
    }
  }
  return out
}

function loadAll(): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const file of shippedFiles()) out[file.slice(ROOT.length + 1)] = portable(loadConfig(file, ENV))
  for (const [where, text] of documentedBlocks()) out[where] = portable(parseConfig(text, { env: ENV, baseDir: join(ROOT, 'examples') }))
  return out
}

if (process.env.WARDLINE_UPDATE_EXAMPLES === '1') writeFileSync(FIXTURE, `${JSON.stringify(loadAll(), null, 2)}\n`)

const expected = JSON.parse(readFileSync(FIXTURE, 'utf8')) as Record<string, unknown>

test('there are shipped and documented configs to load', () => {
  expect(shippedFiles().length).toBeGreaterThanOrEqual(2)
  expect(documentedBlocks().length).toBeGreaterThan(8)
})

test.each(shippedFiles().map((f) => [f.slice(ROOT.length + 1), f]))('%s loads to the same Config as before', (name, file) => {
  expect(portable(loadConfig(file, ENV))).toEqual(expected[name])
})

test.each(documentedBlocks())('%s loads to the same Config as before', (where, text) => {
  const loaded = portable(parseConfig(text, { env: ENV, baseDir: join(ROOT, 'examples') }))
  expect(Object.hasOwn(expected, where)).toBe(true)
  expect(loaded).toEqual(expected[where])
})
