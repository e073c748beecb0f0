/**
 * Which keys hold secrets is said once, by a `secret` mark in the declarative schema (spec.ts). A
 * reload's diff and the logger's list of values to mask both follow it: every marked key is shown
 * masked in the diff, whether its value changes, arrives inside a new block or leaves with one.
 */
import yaml from 'js-yaml'
import { configSecrets, diffConfigs } from '../../src/config/diff'
import { parseConfig } from '../../src/config/load'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import { schemaKeys } from '../../src/config/schema'
import { metaOf } from '../../src/config/spec'
import type { Config } from '../../src/config/types'

type Doc = Record<string, unknown>

const JWT_SECRET = 'a-jwt-secret-that-stays-in-every-document-0123'
const BASE: Doc = { upstream: 'http://127.0.0.1:3001', auth: { mode: 'jwt', jwt: { secret: JWT_SECRET } }, audit: { output: 'stdout' } }

const DOCS_URL = 'http://127.0.0.1:3001/mcp'
/** BASE with one server in place of upstream. */
const SERVERS: Doc = { ...Object.fromEntries(Object.entries(BASE).filter(([k]) => k !== 'upstream')), servers: { docs: { url: DOCS_URL } } }

const load = (doc: Doc): Config => parseConfig(yaml.dump(doc), { env: {}, baseDir: '/srv' })
const diff = (a: Config, b: Config) => diffConfigs(a, b, keysNeedingRestart(a, b))

/** Every key the schema marks secret, as `schemaKeys` names it. */
const SECRET_KEYS = schemaKeys()
  .filter(({ node }) => metaOf(node).secret !== undefined)
  .map(({ pattern }) => pattern)

/**
 * For each secret key: a file with the key set to `value`, a file without it (its block left out or
 * read another way), two values, and the part of a value that must never be shown (a DSN's host and
 * database are shown, its password never).
 */
interface Case {
  readonly withValue: (value: string) => Doc
  readonly without: Doc
  readonly values: readonly [string, string]
  readonly hidden: (value: string) => string
  /** The key's path in these files, where the pattern has an operator's name (`*`). */
  readonly at?: string
}

const whole = (value: string): string => value
const CASES: Readonly<Record<string, Case>> = {
  'auth.jwt.secret': {
    withValue: (v) => ({ ...BASE, auth: { mode: 'jwt', jwt: { secret: v } } }),
    without: { ...BASE, auth: { mode: 'header' } },
    values: ['first-jwt-secret-0123456789abcdef-xyz', 'second-jwt-secret-0123456789abcdef-xyz'],
    hidden: whole,
  },
  'postgres.dsn': {
    withValue: (v) => ({ ...BASE, postgres: { dsn: v } }),
    without: BASE,
    values: ['postgres://wardline:first-db-password@db1.internal/wardline', 'postgres://wardline:second-db-password@db2.internal/wardline'],
    hidden: (v) => new URL(v).password,
  },
  'admin.token': {
    withValue: (v) => ({ ...BASE, admin: { listen: '127.0.0.1:9090', token: v } }),
    without: BASE,
    values: ['first-admin-token-0123456789abcdef-xyz', 'second-admin-token-0123456789abcdef-xyz'],
    hidden: whole,
  },
  'servers.*.headers.*': {
    withValue: (v) => ({ ...SERVERS, servers: { docs: { url: DOCS_URL, headers: { Authorization: v } } } }),
    without: SERVERS,
    values: ['Bearer first-docs-token-0123456789abcdef', 'Bearer second-docs-token-0123456789abcdef'],
    hidden: (v) => v.split(' ')[1],
    at: 'servers.docs.headers.Authorization',
  },
}

/** What the key-name pattern the diff once went by caught: a key named or ending in one of these words. */
const SECRET_NAME = /(^|_)(secret|token|password|passwd|dsn|api_key|private_key)$/i

test("the schema marks servers' header values, the JWT secret, the DSN and the admin token, and every key whose name says it holds a secret", () => {
  expect(SECRET_KEYS).toEqual(['servers.*.headers.*', 'auth.jwt.secret', 'postgres.dsn', 'admin.token'])
  // A key added with a secret's name and without the mark fails here.
  for (const { pattern, node } of [...schemaKeys(), ...schemaKeys('policy')]) {
    const name = pattern.split('.').pop()!.replace(/\[\]$/, '')
    if (SECRET_NAME.test(name)) expect({ key: pattern, secret: metaOf(node).secret !== undefined }).toEqual({ key: pattern, secret: true })
  }
})

test('every secret key has a case below', () => {
  expect(Object.keys(CASES).sort()).toEqual([...SECRET_KEYS].sort())
})

describe.each(SECRET_KEYS)('%s', (key) => {
  const c = CASES[key]
  const path = c.at ?? key
  const [first, second] = c.values
  const shownNowhere = (text: string): void => {
    for (const value of c.values) expect(text).not.toContain(c.hidden(value))
  }

  test('changed: the change is listed, masked, and neither value is shown', () => {
    const changes = diff(load(c.withValue(first)), load(c.withValue(second))).changes
    expect(changes.map((ch) => ch.key)).toEqual([path])
    expect(changes[0]).toMatchObject({ change: 'changed', masked: true })
    shownNowhere(JSON.stringify(changes))
  })

  test('the same value: no change listed', () => {
    expect(diff(load(c.withValue(first)), load(c.withValue(first))).changes).toEqual([])
  })

  test('added and removed, inside its block or alone: masked, never shown', () => {
    const on = load(c.withValue(first))
    const off = load(c.without)
    for (const changes of [diff(off, on).changes, diff(on, off).changes]) {
      const holding = changes.filter((ch) => path === ch.key || path.startsWith(`${ch.key}.`))
      expect(holding).toHaveLength(1)
      expect(holding[0].masked).toBe(true)
      shownNowhere(JSON.stringify(changes))
    }
  })

  test("the logger is given its value, so no line shows it (the diff's own lines included)", () => {
    const secrets = configSecrets(load(c.withValue(first)))
    expect(secrets).toContain(first)
    expect(secrets).toContain(c.hidden(first))
  })
})

test("an operator's name that reads like a secret is a name, not a secret: a tool's budget stays readable", () => {
  const tools = (cost: number): Doc => ({ ...BASE, budget: { tools: { get_token: { cost } } } })
  expect(diff(load(tools(1)), load(tools(2))).changes).toEqual([
    { key: 'budget.tools.get_token.cost', change: 'changed', from: 1, to: 2, restart_needed: false },
  ])
})
