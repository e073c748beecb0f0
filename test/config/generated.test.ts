import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { schemaText } from '../../src/cli/schema'
import { TABLE_END, TABLE_START, keyTable, withKeyTable } from '../../src/config/key-table'
import { schemaKeys } from '../../src/config/schema'
import { ROOT } from '../helpers/cli'

/**
 * What is printed from the declarative schema (src/config/spec.ts) and checked in: the two JSON
 * Schemas and the key table of docs/configuration.md. Each is printed again here and compared with the
 * file, so a key changed in spec.ts without `npm run build && npm run schema` fails CI.
 */

const HOW = 'regenerate with: npm run build && npm run schema'

test.each([
  ['wardline.schema.json', 'config'],
  ['wardline.policy.schema.json', 'policy'],
] as const)('%s is what `wardline schema` prints', (file, which) => {
  const checkedIn = readFileSync(join(ROOT, file), 'utf8')
  expect({ file, fresh: checkedIn === schemaText(which), HOW }).toEqual({ file, fresh: true, HOW })
})

test('the key table in docs/configuration.md is what the schema prints', () => {
  const page = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8')
  expect(page).toContain(TABLE_START)
  expect(page).toContain(TABLE_END)
  expect({ fresh: page === withKeyTable(page), HOW }).toEqual({ fresh: true, HOW })
})

test('the table has one row per key of the schema', () => {
  const rows = keyTable().split('\n').slice(2)
  expect(rows.map((row) => /^\| `([^`]+)`/.exec(row)?.[1])).toEqual(schemaKeys().map((k) => k.pattern))
})

test('the hand-written section tables of docs/configuration.md show the defaults the schema has', () => {
  const page = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8')
  const sections = page.slice(page.indexOf(TABLE_END))
  const defaults = new Map(schemaKeys().map((k) => [k.pattern, (k.node as { default?: unknown }).default]))
  const checked: Array<{ key: string; documented: string; schema: string }> = []
  for (const m of sections.matchAll(/^\| `([^`]+)` \| [^|]* \| `([^`]*)`/gm)) {
    const schema = defaults.get(m[1])
    // Keys whose absence means "none" or "the top-level value" have no default in the schema.
    if (schema === undefined) continue
    checked.push({ key: m[1], documented: m[2], schema: JSON.stringify(schema).replace(/^"|"$/g, '') })
  }
  expect(checked.length).toBeGreaterThan(30)
  expect(checked.filter((c) => c.documented !== c.schema)).toEqual([])
})
