import { execFile } from 'node:child_process'
import { resolve } from 'node:path'

/**
 * The import rules of docs/architecture.md are eslint policies (eslint.boundaries.mjs, part of
 * `npm run lint`). Each probe below is linted as if it were a file at `path`, through eslint's own CLI
 * on standard input: nothing is written to src/. A wrong arrow must fail the lint, naming the rule; a
 * right one must pass, so the rules cannot pass by refusing nothing or fail by refusing everything.
 */
const ROOT = resolve(__dirname, '..')

interface LintResult {
  readonly code: number
  readonly output: string
}

function lintAs(path: string, source: string): Promise<LintResult> {
  const args = [
    resolve(ROOT, 'node_modules/eslint/bin/eslint.js'),
    '--config',
    'eslint.boundaries.mjs',
    '--no-inline-config',
    '--stdin',
    '--stdin-filename',
    path,
  ]
  return new Promise((done, fail) => {
    const child = execFile(process.execPath, args, { cwd: ROOT }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1
      if (code !== 0 && code !== 1) fail(new Error(`eslint exited ${code}: ${stderr}`))
      else done({ code, output: stdout + stderr })
    })
    child.stdin?.end(source)
  })
}

const WRONG: ReadonlyArray<readonly [string, string, string]> = [
  ['a stage folder importing another stage folder', 'src/policy/arrow-probe.ts', "export { jsonRpcStage } from '../jsonrpc/stage'\n"],
  [
    'the budget reading the JSON-RPC stage',
    'src/budget/arrow-probe.ts',
    "import { jsonRpcStage } from '../jsonrpc/stage'\nexport const s = jsonRpcStage\n",
  ],
  ['the admin API importing the composition root', 'src/admin/arrow-probe.ts', "export const later = () => import('../server/compose')\n"],
  [
    'a leaf (log.ts sits beside it) importing config types',
    'src/arrow-probe.ts',
    "import type { Config } from './config/types'\nexport type C = Config\n",
  ],
  [
    'the spine importing a stage',
    'src/pipeline/arrow-probe.ts',
    "import type { BudgetStore } from '../budget/store'\nexport type B = BudgetStore\n",
  ],
  ['config importing the pipeline', 'src/config/arrow-probe.ts', "import type { Stage } from '../pipeline/stage'\nexport type S = Stage\n"],
]

// Each probe is its own eslint process (about a second of start-up): all of them run at once.
let results: readonly LintResult[] = []
beforeAll(async () => {
  results = await Promise.all(WRONG.map(([, path, source]) => lintAs(path, source)))
})

test.each(WRONG.map((probe, i) => [probe[0], i] as const))('%s fails the lint, naming the boundary', (_what, i) => {
  expect(results[i].code).toBe(1)
  expect(results[i].output).toMatch(/boundaries\/dependencies/)
})

test('the arrows the rules allow pass: a stage importing leaves, json/, mcp/, pipeline/, config/, postgres/ and its own folder', async () => {
  const source = [
    "import type { PolicyConfig } from '../config/types'",
    "import { Glob } from '../glob'",
    "import { scanJson } from '../json/scan'",
    "import { isStream } from '../mcp/streams'",
    "import type { Stage } from '../pipeline/stage'",
    "import { openPool } from '../postgres/pool'",
    "import { compilePolicy } from './compile'",
    'export const all: unknown[] = [Glob, scanJson, isStream, openPool, compilePolicy]',
    'export type T = [Stage, PolicyConfig]',
    '',
  ].join('\n')
  expect(await lintAs('src/policy/arrow-probe.ts', source)).toEqual({ code: 0, output: '' })
})
