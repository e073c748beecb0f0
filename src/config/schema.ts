import type { TSchema } from '@sinclair/typebox'
import { ADMIN_TOGETHER, CONFIG_SPEC, ONE_UPSTREAM_KIND, POLICY, keysOf, metaOf, namesOf } from './spec'

/**
 * The JSON Schema of wardline.yaml (and of a policy file), printed from the declarative schema
 * (config/spec.ts) the readers read by, so the two cannot disagree about a key, a type, a bound, a
 * choice or a default. The nodes are JSON Schema already; printing adds what the file format adds:
 * a number or a boolean may come from `${VAR}` (config/env.ts), and `key:` with nothing after it
 * reads as the key left out wherever the key is not required.
 */

export type JsonSchema = Record<string, unknown>

/** JSON Schema draft-07: what yaml-language-server (VS Code's YAML extension, JetBrains, Neovim) supports. */
const DRAFT = 'http://json-schema.org/draft-07/schema#'

/** `${VAR}` or `${VAR:-default}` somewhere in a string (env.ts). */
// Not after a `$`: env.ts reads `$${` as an escaped, literal `${`.
const ENV_REFERENCE = '(?<!\\$)\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}'

/** What `$ref: '#/definitions/environment'` names: a string holding a `${VAR}` reference. */
const DEFINITIONS = {
  environment: {
    type: 'string',
    pattern: ENV_REFERENCE,
    description: 'Read from the environment when the file is loaded: ${VAR}, or ${VAR:-default} when VAR is unset or empty.',
  },
}

interface Shape {
  readonly type?: string
  readonly description?: string
  readonly default?: unknown
  readonly minimum?: number
  readonly exclusiveMinimum?: number
  readonly maximum?: number
  readonly minLength?: number
  readonly minItems?: number
  readonly maxItems?: number
  readonly anyOf?: readonly Shape[]
  readonly const?: unknown
  readonly items?: TSchema
  readonly properties?: Record<string, TSchema>
  readonly patternProperties?: Record<string, TSchema>
}

interface Options {
  /** Numbers and booleans may be `${VAR}` (wardline.yaml); a policy file is taken literally. */
  readonly environment: boolean
}

/** A node as JSON Schema; `blank`: null is accepted (the key may be written with nothing after it). */
function print(node: TSchema, blank: boolean, options: Options): JsonSchema {
  const s = node as Shape
  const meta = metaOf(node)
  const head: JsonSchema = {
    ...(s.description === undefined ? {} : { description: s.description }),
    ...(s.default === undefined ? {} : { default: s.default }),
  }
  const nullable = (type: string): string | string[] => (blank ? [type, 'null'] : type)
  const scalar = (base: JsonSchema): JsonSchema => {
    if (!options.environment) {
      if (base.enum !== undefined) return blank ? { ...head, anyOf: [base, { type: 'null' }] } : { ...head, ...base }
      return { ...head, ...base, type: nullable(base.type as string) }
    }
    return { ...head, anyOf: [base, { $ref: '#/definitions/environment' }, ...(blank ? [{ type: 'null' }] : [])] }
  }
  if (meta.stringOrList) {
    const text = { type: 'string', minLength: 1 }
    return { ...head, anyOf: [text, { type: 'array', items: text }, ...(blank ? [{ type: 'null' }] : [])] }
  }
  if (s.anyOf !== undefined) return scalar({ enum: s.anyOf.map((c) => c.const) })
  switch (s.type ?? '') {
    case 'integer':
    case 'number': {
      const lower = s.exclusiveMinimum !== undefined ? { exclusiveMinimum: s.exclusiveMinimum } : { minimum: s.minimum }
      return scalar({ type: s.type, ...lower, maximum: s.maximum })
    }
    case 'boolean':
      return scalar({ type: 'boolean' })
    case 'string':
      return { ...head, type: nullable('string'), ...(s.minLength === undefined ? {} : { minLength: s.minLength }) }
    case 'array':
      return {
        ...head,
        type: nullable('array'),
        items: print(s.items!, false, options),
        ...(s.minItems === undefined ? {} : { minItems: s.minItems }),
        ...(s.maxItems === undefined ? {} : { maxItems: s.maxItems }),
      }
    case 'object': {
      if (s.patternProperties !== undefined) {
        const [entry] = Object.values(s.patternProperties)
        const names = namesOf(node)
        return {
          ...head,
          type: nullable('object'),
          ...(names === null ? {} : { propertyNames: { pattern: names } }),
          additionalProperties: print(entry, false, options),
        }
      }
      const properties: JsonSchema = {}
      const required: string[] = []
      for (const key of keysOf(node)) {
        const child = s.properties![key]
        const m = metaOf(child)
        if (m.required) required.push(key)
        properties[key] = print(child, !m.required && m.blank !== false, options)
      }
      return {
        ...head,
        type: nullable('object'),
        properties,
        ...(required.length > 0 ? { required } : {}),
        ...(node === CONFIG_SPEC.properties.admin ? { dependencies: ADMIN_TOGETHER } : {}),
        additionalProperties: false,
      }
    }
    default:
      throw new Error(`the config schema has a node it cannot print: ${JSON.stringify(node)}`)
  }
}

/** The JSON Schema of wardline.yaml, as `wardline schema` prints it. */
export function configSchema(): JsonSchema {
  const { description: _none, ...root } = print(CONFIG_SPEC, false, { environment: true })
  return {
    $schema: DRAFT,
    title: 'wardline.yaml',
    description:
      'Wardline gateway configuration (docs/configuration.md). Generated by `wardline schema` from the declarative schema (src/config/spec.ts) that `wardline check-config` reads by; cross-field rules (one JWT key source, postgres.dsn with postgres_storage…) are checked by check-config only.',
    ...root,
    oneOf: ONE_UPSTREAM_KIND,
    definitions: DEFINITIONS,
  }
}

/** The JSON Schema of a policy file (`policy_file:`), as `wardline schema --policy` prints it. Taken literally: no ${VAR}. */
export function policySchema(): JsonSchema {
  const { description: _inline, ...root } = print(POLICY, false, { environment: false })
  return {
    $schema: DRAFT,
    title: 'Wardline policy file',
    description: 'A policy file (policy_file: in wardline.yaml): the same mapping as the inline policy block (docs/policy.md).',
    ...root,
  }
}

/** One key of the schema, for the docs table and the tests: `budget.tools.*.cost`, `policy.rules[].effect`. */
export interface SchemaKey {
  /** The path with `*` for an operator-chosen name and `[]` for a list item. */
  readonly pattern: string
  readonly node: TSchema
  readonly required: boolean
}

/** Every key of wardline.yaml (or of a policy file), parents before children, in the schema's order. */
export function schemaKeys(which: 'config' | 'policy' = 'config'): SchemaKey[] {
  const out: SchemaKey[] = []
  const walk = (node: TSchema, pattern: string): void => {
    const s = node as Shape
    if (s.type === 'array' && s.items !== undefined) {
      out.push({ pattern: `${pattern}[]`, node: s.items, required: false })
      walk(s.items, `${pattern}[]`)
    } else if (s.type === 'object' && s.patternProperties !== undefined) {
      const [entry] = Object.values(s.patternProperties)
      out.push({ pattern: `${pattern}.*`, node: entry, required: false })
      walk(entry, `${pattern}.*`)
    } else if (s.type === 'object' && s.properties !== undefined) {
      for (const key of keysOf(node)) {
        const child = s.properties[key]
        const path = pattern ? `${pattern}.${key}` : key
        out.push({ pattern: path, node: child, required: metaOf(child).required === true })
        walk(child, path)
      }
    }
  }
  walk(which === 'policy' ? POLICY : CONFIG_SPEC, '')
  return out
}
