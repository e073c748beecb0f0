import type { Static, TObject, TSchema } from '@sinclair/typebox'
import { type Node, type Reader, join } from './reader'
import { keyNode, keysOf, metaOf } from './spec'

/**
 * Reading by the declarative schema (config/spec.ts): a block's allowed keys and every leaf's type,
 * bounds, choices and default come from its node, and the problems are the Reader's own words. The
 * path is where the block sits in this file, never a constant of the block: the same node is read at
 * `upstream_health_check` today and at a server's own path later.
 */

interface Shape {
  readonly type?: string
  readonly minimum?: number
  readonly exclusiveMinimum?: number
  readonly maximum?: number
  readonly minLength?: number
  readonly default?: unknown
  readonly anyOf?: ReadonlyArray<{ readonly const?: unknown }>
}

/** A block's mapping, unknown keys noted (with a guess) against the keys its node allows. */
export function readBlock(r: Reader, node: TSchema, value: unknown, path: string): Node {
  return r.object(value, path, keysOf(node))
}

/** The choices of a choice node, in order. */
export function choicesOf(node: TSchema): string[] {
  return ((node as Shape).anyOf ?? []).map((c) => String(c.const))
}

/**
 * One leaf at `path`: the value, or its default (or `fallback` where the node has none) after noting
 * a problem. A text leaf with neither a default nor `required` reads as null when left out.
 */
export function readLeaf<T extends TSchema>(r: Reader, node: T, value: unknown, path: string, fallback?: Static<T>): Static<T> {
  const s = node as Shape
  const meta = metaOf(node)
  const given = (s.default ?? fallback) as never
  if (meta.stringOrList) return r.stringOrList(value, path)
  if (s.anyOf !== undefined) {
    const choices = choicesOf(node)
    return r.oneOf(value, path, choices, given ?? choices[0])
  }
  switch (s.type ?? '') {
    case 'integer':
      return r.int(value, path, given ?? (s.minimum as number), s.minimum as number, s.maximum as number)
    case 'number': {
      const exclusive = s.exclusiveMinimum !== undefined
      const min = (exclusive ? s.exclusiveMinimum : s.minimum) as number
      return r.number(value, path, given ?? (s.maximum as number), min, s.maximum as number, exclusive)
    }
    case 'boolean':
      return r.bool(value, path, given ?? false)
    case 'string': {
      const nonEmpty = s.minLength === 1
      if (s.default === undefined && fallback === undefined && !meta.required) return r.optionalString(value, path)
      return r.string(value, path, given ?? '', { nonEmpty })
    }
    default:
      throw new Error(`${path}: not a leaf of the config schema`)
  }
}

/** One key of a block read by its own node: `readKey(r, AUDIT, o, 'max_queue_entries', 'audit')`. */
export function readKey<B extends TObject, K extends keyof B['properties'] & string>(
  r: Reader,
  block: B,
  o: Node,
  key: K,
  path: string,
  fallback?: Static<B['properties'][K]>,
): Static<B['properties'][K]> {
  return readLeaf(r, keyNode(block, key), o[key], join(path, key), fallback)
}
