import Ajv, { type ValidateFunction } from 'ajv'
import yaml from 'js-yaml'
import { configSchema } from '../../src/config/schema'
import { configProblems } from '../helpers/harness'

/**
 * Red team (obs): the cases where `wardline schema` and check-config could disagree. Each must get
 * the same verdict from both (an editor's squiggle and `wardline check-config` say the same thing).
 */
const SECRET = 'a-test-secret-that-is-long-enough-for-hs256'
const BASE = { upstream: 'http://127.0.0.1:3001', auth: { mode: 'jwt', jwt: { secret: SECRET } }, audit: { output: 'stdout' } }
const TOKEN = 'b'.repeat(40)
const windows = (n: number): unknown[] => Array.from({ length: n }, (_, i) => ({ requests_per_window: 5, window_seconds: i + 1 }))

let validate: ValidateFunction
beforeAll(() => {
  validate = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true }).compile(configSchema())
})

const cases: ReadonlyArray<readonly [string, Record<string, unknown>, Record<string, string>, boolean]> = [
  // budget.limits: 1 to 8 windows (an empty list was a bucket that never refuses, before check-config refused it).
  ['budget.limits: [] is refused', { budget: { limits: [] } }, {}, false],
  ['budget.limits with 8 windows is accepted', { budget: { limits: windows(8) } }, {}, true],
  ['budget.limits with 9 windows is refused', { budget: { limits: windows(9) } }, {}, false],
  [
    'a tenant with limits: [] is refused',
    { budget: { requests_per_window: 5, window_seconds: 5, tenants: { acme: { limits: [] } } } },
    {},
    false,
  ],
  [
    'a tool with 9 windows is refused',
    { budget: { requests_per_window: 5, window_seconds: 5, tools: { t: { limits: windows(9) } } } },
    {},
    false,
  ],
  // admin: listen turns it on and needs token; neither is "off", as wardline.yaml's commented block says.
  ['admin: {} (neither key) is off, not an error', { admin: {} }, {}, true],
  ['admin.token without listen is refused', { admin: { token: TOKEN } }, {}, false],
  ['admin.listen without token is refused', { admin: { listen: '127.0.0.1:9090' } }, {}, false],
  [
    'admin with both (from the environment) is accepted',
    { admin: { listen: '${L}', token: '${T}' } },
    { L: '127.0.0.1:9090', T: TOKEN },
    true,
  ],
  // `$${` is an escaped, literal `${`: no variable is read, so a number key gets text.
  ['an escaped $${X} where a number goes is refused', { max_body_bytes: '$${X}' }, { X: '5' }, false],
  ['$$${X} is a literal $ and an escape: refused', { max_body_bytes: '$$${X}' }, { X: '5' }, false],
  ['1${ZEROS} is read from the environment', { max_body_bytes: '1${ZEROS}' }, { ZEROS: '000' }, true],
  [
    'window lengths from the environment',
    { budget: { limits: [{ requests_per_window: '${R}', window_seconds: '${W}' }] } },
    { R: '5', W: '2.5' },
    true,
  ],
]

test.each(cases)('%s: the schema and check-config agree', (_name, over, env, valid) => {
  const doc = { ...structuredClone(BASE), ...structuredClone(over) }
  const problems = configProblems(yaml.dump(doc), '/srv', env)
  expect(problems.length === 0).toBe(valid)
  expect(validate(doc)).toBe(valid)
})

// check-config reads `admin:` with `listen:` and `token:` both blank as off; the schema refuses null for
// each (they are not nullable, so `dependencies` can tell present from absent). A fix needs the schema to
// say "token required when listen is a non-null string" (draft-07 if/then) from what the readers note.
test.failing('admin with blank listen and token is off for both the schema and check-config', () => {
  const doc = { ...structuredClone(BASE), admin: { listen: null, token: null } }
  expect(configProblems(yaml.dump(doc), '/srv', {})).toEqual([])
  expect(validate(doc)).toBe(true)
})
