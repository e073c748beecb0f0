import { readFileSync } from 'node:fs'
import yaml from 'js-yaml'
import { didYouMean } from './did-you-mean'

/** A file's text, or the problem to report (`cannot be read (ENOENT)`). Both config files read this way. */
export function readText(path: string): { text: string } | { problem: string } {
  try {
    return { text: readFileSync(path, 'utf8') }
  } catch (err) {
    return { problem: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` }
  }
}

/** A YAML document as a plain tree (core schema: no custom tags, no dates), or the problem to report. */
export function parseYaml(text: string): { tree: unknown } | { problem: string } {
  try {
    return { tree: yaml.load(text, { schema: yaml.CORE_SCHEMA }) }
  } catch (err) {
    return { problem: `not valid YAML: ${(err as Error).message.split('\n')[0]}` }
  }
}

/**
 * Reads an untyped YAML tree and notes every problem with its key path instead of stopping at the
 * first one. Each reader returns a usable fallback after noting a problem, so reading goes on and
 * the operator sees every mistake in one run.
 */
export type Node = Record<string, unknown>

export class Reader {
  readonly problems: string[] = []
  /**
   * Key path → the variables its value was read from, in order (env.ts records them while expanding).
   * Only these keys may spell a number or a boolean as text: `max_connections: ${PG_MAX:-10}` works,
   * while a quoted `max_connections: "10"` in the file stays a wrong type, as before; and a busy port
   * names the variable to change (config/origin.ts).
   */
  readonly variables = new Map<string, string[]>()

  note(path: string, problem: string): void {
    this.problems.push(path ? `${path}: ${problem}` : problem)
  }

  /** A mapping with only the allowed keys; `undefined` reads as an empty mapping. */
  object(value: unknown, path: string, allowed: readonly string[]): Node {
    if (value === undefined || value === null) return {}
    if (typeof value !== 'object' || Array.isArray(value)) {
      this.note(path, 'must be a mapping')
      return {}
    }
    for (const key of Object.keys(value)) {
      if (allowed.includes(key)) continue
      const guesses = didYouMean(key, allowed)
      const guess = guesses.length === 0 ? '' : `, did you mean ${guesses.join(' or ')}?`
      this.note(join(path, key), `unknown key${guess} (allowed: ${allowed.join(', ')})`)
    }
    return value as Node
  }

  /** A mapping whose keys are names chosen by the operator (tools, tenants, features). */
  map(value: unknown, path: string): Node {
    if (value === undefined || value === null) return {}
    if (typeof value !== 'object' || Array.isArray(value)) {
      this.note(path, 'must be a mapping')
      return {}
    }
    return value as Node
  }

  list(value: unknown, path: string): unknown[] {
    if (value === undefined || value === null) return []
    if (!Array.isArray(value)) {
      this.note(path, 'must be a list')
      return []
    }
    return value
  }

  string(value: unknown, path: string, fallback: string, opts: { nonEmpty?: boolean } = {}): string {
    if (value === undefined || value === null) return fallback
    if (typeof value !== 'string') {
      this.note(path, 'must be a string')
      return fallback
    }
    if (opts.nonEmpty && value.length === 0) {
      // An unset ${VAR} already said why the value is empty; once is enough.
      if (!this.problems.some((p) => p.startsWith(`${path}: environment variable`))) this.note(path, 'must not be empty')
      return fallback
    }
    return value
  }

  optionalString(value: unknown, path: string): string | null {
    if (value === undefined || value === null) return null
    return this.string(value, path, '', { nonEmpty: true }) || null
  }

  /** One string or a list of strings (an audience, the accepted algorithms); an empty string is a problem. */
  stringOrList(value: unknown, path: string): string[] {
    if (value === undefined || value === null) return []
    if (typeof value === 'string') return value === '' ? (this.note(path, 'must not be empty'), []) : [value]
    return this.list(value, path).flatMap((item, i) => {
      const s = this.string(item, join(path, i), '', { nonEmpty: true })
      return s ? [s] : []
    })
  }

  bool(value: unknown, path: string, fallback: boolean): boolean {
    value = this.typed(value, path, 'bool')
    if (value === undefined || value === null) return fallback
    if (typeof value !== 'boolean') {
      this.note(path, `must be true or false${this.viaEnvironment(value, path)}`)
      return fallback
    }
    return value
  }

  int(value: unknown, path: string, fallback: number, min: number, max: number): number {
    value = this.typed(value, path, 'number')
    if (value === undefined || value === null) return fallback
    if (typeof value !== 'number' || !Number.isInteger(value)) {
      this.note(path, `must be a whole number${this.viaEnvironment(value, path)}`)
      return fallback
    }
    if (value < min || value > max) {
      this.note(path, `must be between ${min} and ${max}`)
      return fallback
    }
    return value
  }

  /** A number in (min, max] when `exclusiveMin`, else [min, max]. */
  number(value: unknown, path: string, fallback: number, min: number, max: number, exclusiveMin = false): number {
    value = this.typed(value, path, 'number')
    if (value === undefined || value === null) return fallback
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      this.note(path, `must be a number${this.viaEnvironment(value, path)}`)
      return fallback
    }
    if ((exclusiveMin ? value <= min : value < min) || value > max) {
      this.note(path, exclusiveMin ? `must be greater than ${min} and at most ${max}` : `must be between ${min} and ${max}`)
      return fallback
    }
    return value
  }

  oneOf<T extends string>(value: unknown, path: string, choices: readonly T[], fallback: T): T {
    if (value === undefined || value === null) return fallback
    if (typeof value !== 'string' || !(choices as readonly string[]).includes(value)) {
      this.note(path, `must be ${choices.slice(0, -1).join(', ')}${choices.length > 1 ? ' or ' : ''}${choices[choices.length - 1]}`)
      return fallback
    }
    return value as T
  }

  /**
   * A value `${VAR}` expansion made, read as the number or boolean its text spells (decimal, as YAML
   * would read it unquoted: `30`, `0.5`, `1e3`; `true` / `false`); anything else is left as it is.
   */
  private typed(value: unknown, path: string, kind: 'number' | 'bool'): unknown {
    if (typeof value !== 'string' || !this.variables.has(path)) return value
    if (kind === 'bool') return value === 'true' ? true : value === 'false' ? false : value
    return /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(value) ? Number(value) : value
  }

  /** Says where a wrong value came from when the file shows only `${VAR}` (never the value: it may be a secret). */
  private viaEnvironment(value: unknown, path: string): string {
    return typeof value === 'string' && this.variables.has(path) ? ' (the environment variable it reads gave other text)' : ''
  }
}

export function join(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`
  return path ? `${path}.${key}` : key
}

/** Deep-freezes a plain tree so no stage can change the running configuration by accident. */
export function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value)
    for (const child of Object.values(value as object)) deepFreeze(child)
  }
  return value
}
