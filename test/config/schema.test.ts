import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'
import yaml from 'js-yaml'
import { parseConfig } from '../../src/config/load'
import type { TSchema } from '@sinclair/typebox'
import { readHealthCheck } from '../../src/config/health-check'
import { Reader } from '../../src/config/reader'
import { type JsonSchema, configSchema, policySchema, schemaKeys } from '../../src/config/schema'
import { metaOf } from '../../src/config/spec'
import { ConfigError } from '../../src/errors'
import { ROOT, runCli } from '../helpers/cli'
import { configProblems } from '../helpers/harness'

/**
 * The JSON Schema is printed from the declarative schema check-config reads by; these tests hold the
 * two to each other: every key, bound, choice, default and required key the printed schema states is
 * checked against check-config itself, key by key, so a reader that stops reading by its node (or the
 * other way round) fails here.
 */

/** The entry name an operator-chosen key (a tenant, a tool) is tried with. */
const SCHEMA_ENTRY_NAME = '<name>'

type Doc = Record<string, unknown>

const SECRET = 'a-test-secret-that-is-long-enough-for-hs256'
const DSN = 'postgres://wardline@127.0.0.1:5432/wardline'
/** A valid file the single-key documents below are built on. */
const BASE: Doc = { upstream: 'http://127.0.0.1:3001', auth: { mode: 'jwt', jwt: { secret: SECRET } }, audit: { output: 'stdout' } }
/** Valid values for required strings whose format only the readers' own checks know (a URL, a DSN). */
const SAMPLES: Readonly<Record<string, unknown>> = {
  upstream: 'http://127.0.0.1:3001',
  'postgres.dsn': DSN,
  'auth.resource_metadata.resource': 'https://mcp.example.com/mcp',
  'admin.listen': '127.0.0.1:9090',
  'admin.token': 'b'.repeat(40),
  'servers.*.url': 'http://127.0.0.1:3001/mcp',
}
const POSTGRES: Doc = { features: { postgres_storage: true }, postgres: { dsn: DSN } }
/**
 * Cross-field rules check-config has and the schema does not (they stay code): the document a key is
 * tried in is adjusted so only the key itself is being judged.
 */
const CONTEXTS: ReadonlyArray<readonly [RegExp, (doc: Doc, value: unknown) => void]> = [
  // Retention applies to the Postgres table only; `audit.output: null` needs Postgres to hold the trail.
  [/^audit\.(retention_days|output)$/, (doc) => Object.assign(doc, structuredClone(POSTGRES))],
  // Postgres storage needs postgres.dsn.
  [/^features\.postgres_storage$/, (doc) => Object.assign(doc, { postgres: { dsn: DSN } })],
  // auth.jwt is refused in header mode.
  [/^auth\.mode$/, (doc, value) => value === 'header' && delete (doc.auth as Doc).jwt],
  // A server's keys are tried in a file of servers, which takes the place of upstream.
  [/^servers\./, (doc) => delete doc.upstream],
  // budget.servers names servers under servers:, which replace upstream.
  [
    /^budget\.servers\./,
    (doc) => {
      delete doc.upstream
      const name = Object.keys((doc.budget as { servers: Doc }).servers)[0]
      doc.servers = { [name]: { url: 'http://127.0.0.1:3001/mcp' } }
    },
  ],
]

let ajv: Ajv
let validateConfig: ValidateFunction
let validatePolicy: ValidateFunction
let schema: JsonSchema

beforeAll(() => {
  schema = configSchema()
  // strict: an unknown keyword or an ambiguous type in the generated schema is a failure, not a warning.
  ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true })
  validateConfig = ajv.compile(schema)
  validatePolicy = ajv.compile(policySchema())
})

/** check-config's problems for a document (the loader, not a stand-in), with the environment given. */
function problemsOf(doc: Doc, env: NodeJS.ProcessEnv = {}, baseDir = '/srv'): string[] {
  const text = yaml.dump(doc)
  expect(yaml.load(text, { schema: yaml.CORE_SCHEMA })).toEqual(doc)
  return configProblems(text, baseDir, env)
}

function schemaErrors(doc: unknown, validate: ValidateFunction = validateConfig): ErrorObject[] {
  return validate(doc) ? [] : [...(validate.errors ?? [])]
}

/** ajv's `/budget/tools/t/cost` as check-config writes it: `budget.tools.t.cost`. */
function dotted(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, s) => (/^\d+$/.test(s) ? `${path}[${s}]` : path ? `${path}.${s}` : s), '')
}

/** A recorded path (`budget.tools.<name>.limits[0].window_seconds`) as keys and list indexes. */
function tokens(path: string): Array<string | number> {
  const out: Array<string | number> = []
  for (const part of path.split('.')) {
    const [name, ...indexes] = part.split('[')
    out.push(name === SCHEMA_ENTRY_NAME ? 'probe_name' : name)
    for (const i of indexes) out.push(Number(i.replace(']', '')))
  }
  return out
}

function patternOf(path: string): string {
  return path.split(SCHEMA_ENTRY_NAME).join('*').split('[0]').join('[]')
}

/** The schema of the value at `keys` (through anyOf branches that hold objects or arrays). */
function schemaAt(keys: ReadonlyArray<string | number>, node: JsonSchema = schema): JsonSchema | null {
  if (keys.length === 0) return node
  const branches = [node, ...((node.anyOf as JsonSchema[] | undefined) ?? [])]
  const [head, ...rest] = keys
  for (const b of branches) {
    const next =
      typeof head === 'number'
        ? (b.items as JsonSchema | undefined)
        : ((b.properties as Record<string, JsonSchema> | undefined)?.[head] ??
          (typeof b.additionalProperties === 'object' ? (b.additionalProperties as JsonSchema) : undefined))
    if (next !== undefined) return schemaAt(rest, next)
  }
  return null
}

/** A valid value for a key check-config requires, from the samples or the schema's own bounds. */
function sampleFor(keys: ReadonlyArray<string | number>): unknown {
  const path = keys.map((k) => (typeof k === 'number' ? '[]' : k === 'probe_name' ? '*' : k)).join('.')
  const sample = SAMPLES[path.replace(/\.\[\]/g, '[]')]
  if (sample !== undefined) return structuredClone(sample)
  const s = schemaAt(keys) ?? {}
  const branch = ((s.anyOf as JsonSchema[] | undefined) ?? [s]).find((b) => b.$ref === undefined && b.type !== 'null') ?? s
  if (Array.isArray(branch.enum)) return branch.enum[0]
  const type: unknown = Array.isArray(branch.type) ? (branch.type as unknown[])[0] : branch.type
  if (type === 'integer') return branch.minimum
  if (type === 'number') return branch.maximum
  if (type === 'boolean') return false
  if (type === 'object') return fillRequired({}, keys)
  if (type === 'array') return []
  return 'x'
}

function fillRequired(node: Doc, keys: ReadonlyArray<string | number>): Doc {
  const s = schemaAt(keys)
  const objectBranch = [s, ...((s?.anyOf as JsonSchema[] | undefined) ?? [])].find((b) => b?.required !== undefined)
  for (const key of (objectBranch?.required as string[] | undefined) ?? []) {
    if (!(key in node)) node[key] = sampleFor([...keys, key])
  }
  return node
}

/** BASE with `value` at the recorded `path`, every object on the way holding its required keys. */
function docWith(path: string, value: unknown): Doc {
  const doc = structuredClone(BASE)
  const keys = tokens(path)
  let node: Doc | unknown[] = doc
  keys.forEach((key, i) => {
    const last = i === keys.length - 1
    const container = node as Record<string | number, unknown>
    if (last) {
      if (value === undefined) delete container[key]
      else container[key] = value
      return
    }
    let child = container[key]
    if (child === undefined || child === null || typeof child !== 'object') {
      child = typeof keys[i + 1] === 'number' ? [] : {}
      container[key] = child
    }
    if (!Array.isArray(child)) fillRequired(child as Doc, keys.slice(0, i + 1))
    node = child as Doc | unknown[]
  })
  // Objects created on the way got their required keys; the target's own siblings too.
  const parentKeys = keys.slice(0, -1)
  if (parentKeys.length > 0 && typeof keys[keys.length - 1] === 'string') {
    const parent = parentKeys.reduce<unknown>((n, k) => (n as Record<string | number, unknown>)[k], doc)
    if (parent && typeof parent === 'object' && !Array.isArray(parent)) {
      const before = Object.keys(parent)
      fillRequired(parent as Doc, parentKeys)
      if (value === undefined) delete (parent as Doc)[keys[keys.length - 1] as string]
      expect(Object.keys(parent).length).toBeGreaterThanOrEqual(before.length)
    }
  }
  for (const [pattern, adjust] of CONTEXTS) if (pattern.test(patternOf(path))) adjust(doc, value)
  return doc
}

/** Both verdicts on one document; where both refuse, they name the same key. */
function judge(doc: Doc, env: NodeJS.ProcessEnv = {}): { schemaOk: boolean; configOk: boolean; errors: ErrorObject[]; problems: string[] } {
  const errors = schemaErrors(doc)
  const problems = problemsOf(doc, env)
  return { schemaOk: errors.length === 0, configOk: problems.length === 0, errors, problems }
}

function expectAgreement(path: string, value: unknown, env: NodeJS.ProcessEnv = {}): { schemaOk: boolean; configOk: boolean } {
  const doc = docWith(path, value)
  const v = judge(doc, env)
  const where = `${path} = ${JSON.stringify(value)}: schema ${v.schemaOk ? 'accepts' : `refuses (${JSON.stringify(v.errors.map((e) => [e.instancePath, e.message]))})`}, check-config ${v.configOk ? 'accepts' : `refuses (${v.problems.join('; ')})`}`
  expect({ agree: v.schemaOk === v.configOk, where }).toEqual({ agree: true, where })
  if (!v.schemaOk) {
    // The refusal is located: ajv points at the key (or its object), and check-config names that path.
    const located = v.errors.map((e) => dotted(e.instancePath))
    expect({ where, hit: v.problems.some((p) => located.some((l) => p.startsWith(l))) }).toEqual({ where, hit: true })
  }
  return v
}

/** How check-config reads a node: the Reader call it makes, with its bounds, choices and fallback. */
function callOf(node: TSchema): Record<string, unknown> {
  const s = node as unknown as Record<string, unknown>
  const meta = metaOf(node)
  if (meta.stringOrList) return { kind: 'stringOrList' }
  if (Array.isArray(s.anyOf))
    return { kind: 'oneOf', fallback: s.default, choices: (s.anyOf as Array<{ const: string }>).map((c) => c.const) }
  if (s.type === 'integer') return { kind: 'int', fallback: s.default, min: s.minimum, max: s.maximum }
  if (s.type === 'number') {
    const exclusiveMin = s.exclusiveMinimum !== undefined
    return { kind: 'number', fallback: s.default, min: exclusiveMin ? s.exclusiveMinimum : s.minimum, max: s.maximum, exclusiveMin }
  }
  if (s.type === 'boolean') return { kind: 'bool', fallback: s.default }
  if (s.type === 'string') {
    if (s.default === undefined && !meta.required) return { kind: 'optionalString' }
    return { kind: 'string', fallback: s.default ?? '', nonEmpty: s.minLength === 1 }
  }
  if (s.type === 'array') return { kind: 'list' }
  if (s.patternProperties !== undefined) return { kind: 'map' }
  return { kind: 'object' }
}

const keysOf = (kind: string): Array<{ path: string; call: Record<string, unknown> }> =>
  schemaKeys()
    .map(({ pattern, node }) => ({ path: pattern.split('*').join(SCHEMA_ENTRY_NAME).split('[]').join('[0]'), call: callOf(node) }))
    .filter(({ call }) => call.kind === kind)

describe('wardline schema', () => {
  // That the checked-in copies are what this prints: test/config/generated.test.ts.
  test('the command prints the schema on stdout and exits 0, as an operator runs it', () => {
    const r = runCli(['schema'])
    expect(r).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(r.stdout)).toEqual(configSchema())
    const p = runCli(['schema', '--policy'])
    expect(p).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(p.stdout)).toEqual(policySchema())
    expect(runCli(['schema', '--bogus']).code).toBe(1)
  })

  test('it is draft-07 (what yaml-language-server supports) and compiles under ajv strict mode', () => {
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#')
    expect(ajv.validateSchema(schema)).toBe(true)
    expect(schema.additionalProperties).toBe(false)
  })

  test('every key has a type in the schema', () => {
    const untyped: string[] = []
    const walk = (node: JsonSchema, path: string): void => {
      const branches = [node, ...((node.anyOf as JsonSchema[] | undefined) ?? [])]
      if (!branches.some((b) => b.type !== undefined || b.enum !== undefined || b.anyOf !== undefined)) untyped.push(path)
      for (const b of branches) {
        for (const [k, child] of Object.entries((b.properties as Record<string, JsonSchema> | undefined) ?? {}))
          walk(child, path ? `${path}.${k}` : k)
        if (typeof b.additionalProperties === 'object') walk(b.additionalProperties as JsonSchema, `${path}.*`)
        if (b.items) walk(b.items as JsonSchema, `${path}[]`)
      }
    }
    walk(schema, '')
    expect(untyped).toEqual([])
  })

  test('every key has a description (editors show it on hover; the docs table lists it)', () => {
    expect(
      schemaKeys()
        .filter((k) => typeof (k.node as { description?: unknown }).description !== 'string')
        .map((k) => k.pattern),
    ).toEqual([])
  })
})

describe('the shipped configs validate against the schema', () => {
  const env = { WARDLINE_JWT_SECRET: SECRET, WARDLINE_POSTGRES_DSN: DSN, DOCS_TOKEN: 'd'.repeat(40), TICKETS_API_KEY: 't'.repeat(40) }
  const configFiles = [join(ROOT, 'wardline.yaml'), ...readdirSync(join(ROOT, 'examples')).map((f) => join(ROOT, 'examples', f))].filter(
    (f) => /\.ya?ml$/.test(f),
  )

  test.each(configFiles.map((f) => [f.slice(ROOT.length + 1), f]))('%s', (_name, file) => {
    const text = readFileSync(file, 'utf8')
    const tree = yaml.load(text, { schema: yaml.CORE_SCHEMA }) as Doc
    const isPolicy = 'rules' in tree && !('upstream' in tree)
    expect(schemaErrors(tree, isPolicy ? validatePolicy : validateConfig)).toEqual([])
    if (!isPolicy) expect(configProblems(text, dirname(file), env)).toEqual([])
    // The modeline, when there, points at the schema for this kind of file, and the file exists.
    const modeline = /^# yaml-language-server: \$schema=(\S+)$/m.exec(text)
    if (modeline) {
      expect(modeline[1].endsWith(isPolicy ? 'wardline.policy.schema.json' : 'wardline.schema.json')).toBe(true)
      expect(existsSync(join(dirname(file), modeline[1]))).toBe(true)
      expect(text.indexOf(modeline[0])).toBe(0)
    }
  })

  test('wardline.yaml and the examples carry the modeline as their first line', () => {
    expect(readFileSync(join(ROOT, 'wardline.yaml'), 'utf8').split('\n')[0]).toBe('# yaml-language-server: $schema=./wardline.schema.json')
    expect(readFileSync(join(ROOT, 'examples/wardline.postgres.yaml'), 'utf8').split('\n')[0]).toBe(
      '# yaml-language-server: $schema=../wardline.schema.json',
    )
    expect(readFileSync(join(ROOT, 'examples/servers.yaml'), 'utf8').split('\n')[0]).toBe(
      '# yaml-language-server: $schema=../wardline.schema.json',
    )
    expect(readFileSync(join(ROOT, 'examples/policy.yaml'), 'utf8').split('\n')[0]).toBe(
      '# yaml-language-server: $schema=../wardline.policy.schema.json',
    )
  })

  // The docs show wardline.yaml in pieces: each piece, laid over a minimal file, must pass both.
  const blocks = readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .flatMap((f) => {
      const text = readFileSync(join(ROOT, 'docs', f), 'utf8')
      return [...text.matchAll(/^```yaml\n([\s\S]*?)^```/gm)].map(
        (m) => [`docs/${f}:${text.slice(0, m.index).split('\n').length}`, m[1]] as const,
      )
    })

  test('the docs have YAML examples to check', () => {
    expect(blocks.length).toBeGreaterThan(5)
  })

  test.each(blocks)('%s', (_where, block) => {
    const tree = yaml.load(block, { schema: yaml.CORE_SCHEMA })
    if (tree === null || typeof tree !== 'object' || Array.isArray(tree)) return
    // A policy file's content goes against the policy schema.
    if ('rules' in tree && 'default' in tree && !('upstream' in tree)) return expect(schemaErrors(tree, validatePolicy)).toEqual([])
    // Other files' YAML (a Prometheus scrape config, a compose file) names no key of wardline.yaml.
    if (!Object.keys(tree).some((k) => k in (schema.properties as Doc))) return
    const doc: Doc = { ...structuredClone(BASE), ...(tree as Doc) }
    // A piece naming servers takes the place of BASE's upstream (the two never go together).
    if ('servers' in tree) delete doc.upstream
    expect(schemaErrors(doc)).toEqual([])
    // examples/ holds policy.yaml, which the policy_file example names.
    // Every variable the example reads is set, to a value of the kind its name says (a DSN, a secret).
    const vars = [...block.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((m) => m[1])
    const exampleEnv = Object.fromEntries(vars.map((v) => [v, /DSN/.test(v) ? DSN : 'c'.repeat(48)]))
    expect(configProblems(yaml.dump(doc), join(ROOT, 'examples'), { ...env, ...exampleEnv })).toEqual([])
  })
})

describe('a wrong file fails the schema at the key check-config names', () => {
  const cases: Array<[string, Doc, string, string]> = [
    ['an unknown key', { budget: { tools: { search: { cots: 1 } } } }, '/budget/tools/search', 'additionalProperties'],
    ['an unknown top-level key', { colour: 'blue' }, '', 'additionalProperties'],
    ['a wrong type', { features: { budget_enforcement: 'yes' } }, '/features/budget_enforcement', 'type'],
    ['a string where a number goes (not an ${VAR})', { max_body_bytes: '4mb' }, '/max_body_bytes', 'type'],
    ['an out-of-range number', { max_json_depth: 3 }, '/max_json_depth', 'minimum'],
    ['a fraction where a whole number goes', { upstream_connections: 1.5 }, '/upstream_connections', 'type'],
    ['a zero window (exclusive minimum)', { budget: { window_seconds: 0 } }, '/budget/window_seconds', 'exclusiveMinimum'],
    ['a bad enum', { log_level: 'loud' }, '/log_level', 'enum'],
    ['a missing required key', { budget: { repeat_limit: { calls: 5 } } }, '/budget/repeat_limit', 'required'],
    ['a blank limits list (no window at all)', { budget: { limits: null } }, '/budget/limits', 'type'],
    ['a rule without an effect', { policy: { default: 'deny', rules: [{ identity: '*', tool: '*' }] } }, '/policy/rules/0', 'required'],
  ]
  test.each(cases)('%s', (_name, overlay, instancePath, keyword) => {
    const doc = { ...structuredClone(BASE), ...overlay }
    const errors = schemaErrors(doc)
    expect(errors).toContainEqual(expect.objectContaining({ instancePath, keyword }))
    const problems = problemsOf(doc)
    expect(problems.length).toBeGreaterThan(0)
    const path = dotted(instancePath)
    expect(problems.some((p) => p.startsWith(path))).toBe(true)
  })

  test('without upstream or servers the schema says which keys are missing', () => {
    const { upstream: _u, ...doc } = structuredClone(BASE)
    expect(schemaErrors(doc)).toContainEqual(expect.objectContaining({ keyword: 'required', params: { missingProperty: 'upstream' } }))
    expect(schemaErrors(doc)).toContainEqual(expect.objectContaining({ keyword: 'required', params: { missingProperty: 'servers' } }))
    expect(problemsOf(doc)).toContainEqual(expect.stringMatching(/^upstream: is required/))
  })

  test('upstream and servers together fail both; so does a server name an editor can flag as typed', () => {
    const both = { ...structuredClone(BASE), servers: { docs: { url: 'http://127.0.0.1:3001/mcp' } } }
    expect(schemaErrors(both)).toContainEqual(expect.objectContaining({ instancePath: '', keyword: 'oneOf' }))
    expect(problemsOf(both)).toContainEqual(expect.stringMatching(/^upstream: and servers cannot both be set/))
    const { upstream: _u, ...alone } = structuredClone(BASE)
    for (const name of ['Docs', 'a..b', 'a%2Fb', 'x'.repeat(33), '', '-docs']) {
      const doc = { ...structuredClone(alone), servers: { [name]: { url: 'http://127.0.0.1:3001/mcp' } } }
      expect(schemaErrors(doc)).toContainEqual(expect.objectContaining({ instancePath: '/servers', keyword: 'propertyNames' }))
      expect(problemsOf(doc)).toEqual([expect.stringMatching(/^servers(\.|: has an empty name).* is not a valid server name/)])
    }
    const good = {
      ...structuredClone(alone),
      servers: { docs: { url: 'http://127.0.0.1:3001/mcp' }, ['x'.repeat(32)]: { url: 'http://127.0.0.1:3002/mcp' } },
    }
    expect([schemaErrors(good), problemsOf(good)]).toEqual([[], []])
  })

  test('a policy file: a wrong key and a bad effect fail the policy schema', () => {
    const errors = schemaErrors(
      { default: 'allow', rules: [{ identity: '*', tool: '*', effect: 'permit', tenat: 'acme' }] },
      validatePolicy,
    )
    expect(errors).toContainEqual(expect.objectContaining({ instancePath: '/rules/0/effect', keyword: 'enum' }))
    expect(errors).toContainEqual(expect.objectContaining({ instancePath: '/rules/0', keyword: 'additionalProperties' }))
    // A policy file is taken literally: no ${VAR} there, so the policy schema refuses one for a bool.
    expect(schemaErrors({ default: 'allow', filter_lists: '${X}' }, validatePolicy)).toContainEqual(
      expect.objectContaining({ instancePath: '/filter_lists', keyword: 'type' }),
    )
  })
})

describe('one source: the schema and check-config agree, key by key', () => {
  test('every whole-number key: at and past both bounds, and a fraction', () => {
    const keys = keysOf('int')
    expect(keys.length).toBeGreaterThan(15)
    for (const { path, call } of keys) {
      const min = call.min as number
      const max = call.max as number
      for (const value of [min - 1, min, max, max + 1, min + 0.5]) expectAgreement(path, value)
      // The bound the schema states is the one check-config enforces.
      expect(expectAgreement(path, min).configOk).toBe(true)
      expect(expectAgreement(path, min - 1).configOk).toBe(false)
    }
  })

  test('every number key: at and past both bounds, an exclusive minimum excluded', () => {
    const keys = keysOf('number')
    expect(keys.length).toBeGreaterThan(10)
    for (const { path, call } of keys) {
      const min = call.min as number
      const max = call.max as number
      const values = [min, min + 0.25, min - 0.25, max, max + 0.25, max + 1]
      for (const value of values) expectAgreement(path, value)
      expect(expectAgreement(path, min).configOk).toBe(!call.exclusiveMin)
      expect(expectAgreement(path, max).configOk).toBe(true)
    }
  })

  test('every number, whole number and bool key may come from ${VAR}; check-config reads the text as the value', () => {
    for (const { path, call } of [...keysOf('int'), ...keysOf('number'), ...keysOf('bool')]) {
      const good = call.kind === 'bool' ? String(!call.fallback) : String(call.max)
      expectAgreement(path, '${WL_SCHEMA_TEST}', { WL_SCHEMA_TEST: good })
      expectAgreement(path, '${WL_SCHEMA_UNSET:-' + good + '}')
      // The schema cannot know what the variable will hold; check-config can, and says where it came from.
      const bad = judge(docWith(path, '${WL_SCHEMA_TEST}'), { WL_SCHEMA_TEST: 'twelve' })
      expect(bad.schemaOk).toBe(true)
      expect(bad.problems).toEqual([
        expect.stringMatching(
          new RegExp(
            `^${path
              .split(SCHEMA_ENTRY_NAME)
              .join('probe_name')
              .replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: `,
          ),
        ),
      ])
    }
  })

  test('every bool key: true and false pass, text and numbers fail', () => {
    for (const { path } of keysOf('bool')) {
      for (const value of [true, false]) expect(expectAgreement(path, value).configOk).toBe(true)
      for (const value of ['yes', 1, 'true']) expect(expectAgreement(path, value).configOk).toBe(false)
    }
  })

  test('every choice key: each choice passes, anything else fails', () => {
    const keys = keysOf('oneOf')
    expect(keys.map((k) => k.path)).toEqual(expect.arrayContaining(['log_level', 'auth.mode', 'budget.on_store_error', 'tool_refusals']))
    for (const { path, call } of keys) {
      for (const choice of call.choices as string[]) expect(expectAgreement(path, choice).configOk).toBe(true)
      // A choice in the other case (choices are case-sensitive: `HTTP`, and `get` for upstream_health_check.method).
      const first = (call.choices as string[])[0]
      const otherCase = first === first.toUpperCase() ? first.toLowerCase() : first.toUpperCase()
      for (const value of ['nope', otherCase, 3]) expect(expectAgreement(path, value).configOk).toBe(false)
    }
  })

  test('every string key: empty text and a number fail where check-config refuses them', () => {
    for (const { path, call } of [...keysOf('string'), ...keysOf('optionalString'), ...keysOf('stringOrList')]) {
      expectAgreement(path, 5)
      if (call.kind !== 'string' || call.nonEmpty) expect(expectAgreement(path, '').configOk).toBe(false)
    }
  })

  test('every mapping: an unknown key fails both, at that mapping', () => {
    const objects = keysOf('object')
    expect(objects.length).toBeGreaterThan(8)
    for (const { path } of objects) {
      const doc = docWith(`${path}.not_a_key`, 1)
      const v = judge(doc)
      expect({ path, schemaOk: v.schemaOk, configOk: v.configOk }).toEqual({ path, schemaOk: false, configOk: false })
      expect(v.errors).toContainEqual(
        expect.objectContaining({ keyword: 'additionalProperties', params: { additionalProperty: 'not_a_key' } }),
      )
      expect(v.problems).toContainEqual(expect.stringContaining('not_a_key: unknown key'))
    }
    // A mapping where a list or text goes, and the other way round.
    for (const { path } of objects) expectAgreement(path, 'text')
    for (const { path } of keysOf('list')) expectAgreement(path, { a: 1 })
  })

  test('every key the schema requires: left out, both refuse; blank (null) where the schema allows it, check-config accepts', () => {
    const required: string[] = []
    const nullable: string[] = []
    const walk = (node: JsonSchema, path: string): void => {
      for (const b of [node, ...((node.anyOf as JsonSchema[] | undefined) ?? [])]) {
        for (const r of (b.required as string[] | undefined) ?? []) required.push(path ? `${path}.${r}` : r)
        for (const [k, child] of Object.entries((b.properties as Record<string, JsonSchema> | undefined) ?? {})) {
          const p = path ? `${path}.${k}` : k
          const allowsNull = [child, ...((child.anyOf as JsonSchema[] | undefined) ?? [])].some(
            (c) => c.type === 'null' || (Array.isArray(c.type) && c.type.includes('null')),
          )
          if (allowsNull) nullable.push(p)
          walk(child, p)
        }
        if (typeof b.additionalProperties === 'object') walk(b.additionalProperties as JsonSchema, `${path}.${SCHEMA_ENTRY_NAME}`)
        if (b.items) walk(b.items as JsonSchema, `${path}[0]`)
      }
    }
    walk(schema, '')
    expect(required).toEqual(expect.arrayContaining(['servers.<name>.url', 'policy.default', 'postgres.dsn', 'budget.repeat_limit.calls']))
    for (const path of required) expect(expectAgreement(path, undefined).configOk).toBe(false)
    // What the schema means by allowing null: `key:` with nothing after it reads as the key left out.
    expect(nullable.length).toBeGreaterThan(30)
    for (const path of nullable) {
      const leftOut = problemsOf(docWith(path, undefined))
      expect({ path, problems: problemsOf(docWith(path, null)) }).toEqual({ path, problems: leftOut })
      // Where leaving the key out is fine, so is a blank (auth is not: jwt mode needs a key source, a cross-field rule).
      if (leftOut.length === 0) expect(schemaErrors(docWith(path, null))).toEqual([])
    }
    // And the keys that may not be blank: a blank policy_file is not "no policy".
    for (const path of ['policy_file', 'policy', 'upstream', 'budget.limits']) expect(expectAgreement(path, null).configOk).toBe(false)
  })

  test('defaults the schema shows are what a file without the key gets', () => {
    const parse = (doc: Doc) => parseConfig(yaml.dump(doc), { env: {}, baseDir: '/srv' })
    const config = parse(BASE)
    const read: Record<string, (c: ReturnType<typeof parse>) => unknown> = {
      listen: (c) => `${c.listen.host}:${c.listen.port}`,
      upstream_timeout_seconds: (c) => c.upstream!.timeoutSeconds,
      upstream_connections: (c) => c.upstream!.connections,
      max_body_bytes: (c) => c.limits.maxBodyBytes,
      max_json_depth: (c) => c.limits.maxJsonDepth,
      max_batch_messages: (c) => c.limits.maxBatchMessages,
      max_concurrent_per_identity: (c) => c.limits.maxConcurrentPerIdentity,
      request_timeout_seconds: (c) => c.limits.requestTimeoutSeconds,
      session_idle_seconds: (c) => c.limits.sessionIdleSeconds,
      max_sessions: (c) => c.limits.maxSessions,
      max_sessions_per_identity: (c) => c.limits.maxSessionsPerIdentity,
      shutdown_grace_seconds: (c) => c.shutdownGraceSeconds,
      shutdown_delay_seconds: (c) => c.shutdownDelaySeconds,
      log_level: (c) => c.logLevel,
      tool_refusals: (c) => c.toolRefusals,
      'features.budget_enforcement': (c) => c.features.budgetEnforcement,
      'audit.max_queue_entries': (c) => c.audit.maxQueueEntries,
      'auth.mode': (c) => c.auth.mode,
      'auth.jwt.identity_claim': (c) => (c.auth.mode === 'jwt' ? c.auth.jwt.identityClaim : null),
      'auth.jwt.clock_tolerance_seconds': (c) => (c.auth.mode === 'jwt' ? c.auth.jwt.clockToleranceSeconds : null),
      'auth.jwt.jwks_timeout_seconds': (c) => (c.auth.mode === 'jwt' ? c.auth.jwt.jwksTimeoutSeconds : null),
      'auth.jwt.cache_entries': (c) => (c.auth.mode === 'jwt' ? c.auth.jwt.cacheEntries : null),
      'budget.check_timeout_seconds': (c) => c.budget.checkTimeoutSeconds,
      'budget.on_store_error': (c) => c.budget.onStoreError,
    }
    for (const [key, get] of Object.entries(read)) {
      const node = schemaAt(tokens(key))
      expect({ key, default: node?.default }).toEqual({ key, default: get(config) })
    }
    expect(schemaAt(tokens('budget.tools.probe_name.cost'))?.default).toBe(1)
    expect(parse({ ...BASE, budget: { tools: { t: { requests_per_window: 5, window_seconds: 60 } } } }).budget.tools.t.cost).toBe(1)
    expect(schemaAt(tokens('policy.rules[0].method'))?.default).toBe('tools/call')
    expect(schemaAt(tokens('policy.filter_lists'))?.default).toBe(true)
    // A tenant's window inherits the top-level one, and retention has no default (keep): no default shown.
    expect(schemaAt(tokens('budget.tenants.probe_name.window_seconds'))).not.toHaveProperty('default')
    expect(schemaAt(tokens('budget.repeat_limit.calls'))).not.toHaveProperty('default')
    expect(schemaAt(tokens('audit.retention_days'))).not.toHaveProperty('default')
  })

  test('the loader fixes the schema work found: blank values that used to read as a silent default or crash', () => {
    const problems = (doc: Doc): string[] => {
      try {
        parseConfig(yaml.dump({ ...structuredClone(BASE), ...doc }), { env: {}, baseDir: '/srv' })
        return []
      } catch (err) {
        if (err instanceof ConfigError) return [...err.problems]
        throw err
      }
    }
    // `limits:` left blank was an identity bucket with no window: every identity unlimited.
    expect(problems({ budget: { limits: null } })).toEqual(['budget.limits: must list at least one window'])
    // An empty top-level list with a tenant pair crashed check-config with a TypeError.
    expect(problems({ budget: { limits: [], tenants: { acme: { requests_per_window: 5, window_seconds: 60 } } } })).toEqual([
      'budget.limits: must list at least one window',
    ])
    expect(problems({ upstream: null })).toEqual([expect.stringMatching(/^upstream: is required/)])
    expect(problems({ postgres: { dsn: null } })).toEqual(['postgres.dsn: is required'])
    expect(problems({ budget: { repeat_limit: { calls: null, window_seconds: 60 } } })).toEqual([
      'budget.repeat_limit: must set calls and window_seconds',
    ])
  })
})

describe('a block is read at the path it is placed at', () => {
  test('the upstream health check block read at another path names that path in every problem', () => {
    const r = new Reader()
    readHealthCheck(r, { methd: 'GET', interval_seconds: 0, url: 'ftp://x' }, 'servers.alpha.health_check')
    expect(r.problems).toEqual([
      'servers.alpha.health_check.methd: unknown key, did you mean method? (allowed: enabled, url, method, interval_seconds, timeout_seconds, affects_readiness)',
      'servers.alpha.health_check.url: must use http or https',
      'servers.alpha.health_check.interval_seconds: must be greater than 0 and at most 3600',
    ])
  })
})

describe('numbers and booleans from ${VAR}', () => {
  const base = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'
  test('an expanded value is read as the number or boolean it spells; a quoted literal stays a wrong type', () => {
    const config = parseConfig(
      `${base}max_body_bytes: \${BODY}\nupstream_timeout_seconds: \${T:-2.5}\nfeatures:\n  budget_enforcement: \${B}\n`,
      {
        env: { BODY: '1e3', B: 'true' },
        baseDir: '/srv',
      },
    )
    expect([config.limits.maxBodyBytes, config.upstream!.timeoutSeconds, config.features.budgetEnforcement]).toEqual([1000, 2.5, true])
    expect(configProblems(`${base}max_body_bytes: "1024"\nfeatures: { budget_enforcement: "true" }\n`).sort()).toEqual([
      'features.budget_enforcement: must be true or false',
      'max_body_bytes: must be a whole number',
    ])
  })

  test('text that only looks like a number, an escaped $${ and a value split around a reference are judged as text', () => {
    const cases: Array<[string, NodeJS.ProcessEnv, string]> = [
      ['max_body_bytes: ${N}', { N: '0x10' }, 'max_body_bytes: must be a whole number (the environment variable it reads gave other text)'],
      ['max_body_bytes: ${N}', { N: ' 10' }, 'max_body_bytes: must be a whole number (the environment variable it reads gave other text)'],
      // A number, but not a whole one: said as for a literal 1.5.
      ['max_body_bytes: ${N}', { N: '1.5' }, 'max_body_bytes: must be a whole number'],
      [
        // Block style: in a flow mapping ({ … }) YAML would read the braces of ${P} as its own.
        'features:\n  postgres_storage: ${P}',
        { P: 'yes' },
        'features.postgres_storage: must be true or false (the environment variable it reads gave other text)',
      ],
      // The escape writes a literal `${N}`: no variable was read, so this is text written in the file.
      ['max_body_bytes: $${N}', { N: '10' }, 'max_body_bytes: must be a whole number'],
      ['max_body_bytes: 1${ZEROS}', { ZEROS: '000' }, ''],
    ]
    for (const [line, env, problem] of cases) {
      expect({ line, problems: configProblems(`${base}${line}\n`, '/srv', env) }).toEqual({ line, problems: problem ? [problem] : [] })
    }
  })
})
