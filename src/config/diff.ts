import type { TSchema } from '@sinclair/typebox'
import { maskUrlSecrets } from '../log'
import { configOrigin } from './origin'
import { join } from './reader'
import { CONFIG_SPEC, POLICY, childOf, metaOf } from './spec'
import type { PolicyConfig } from './types'

/** One YAML key whose value differs between two loads of the file, ready to log. */
export interface ConfigChange {
  /** Dotted YAML path: `budget.limits[0].requests_per_window`; `policy_file:rules[2].effect` inside a policy file. */
  readonly key: string
  readonly change: 'added' | 'removed' | 'changed'
  /** The old value (absent when added), with secrets masked and long values cut. */
  readonly from?: unknown
  readonly to?: unknown
  /** The key is read only at startup: the running gateway keeps the old value until a restart. */
  readonly restart_needed: boolean
  /** Present when a secret was masked in from/to. */
  readonly masked?: true
}

export interface ConfigDiff {
  /** At most `limit` changes, in file order. */
  readonly changes: readonly ConfigChange[]
  /** For the summary line: how many keys changed, and how many of them are not listed. */
  readonly summary: { readonly changed_keys: number; readonly changed_keys_not_listed?: number }
}

/** Enough to see what a reload did; a policy rewritten wholesale says how many more changed instead of flooding the log. */
export const MAX_LISTED_CHANGES = 20
/** Longest value shown (JSON text): a whole added block is cut past this. */
const MAX_VALUE_CHARS = 200

/**
 * What changed between two loaded configs, in YAML keys: the expanded trees the loader kept beside
 * each Config are compared leaf by leaf (a block added or removed is one change), and rules read from
 * a policy_file are compared too (under `policy_file:`). `restartKeys` are the top-level keys
 * keysNeedingRestart found; their changes are marked. Configs not made by the loader diff as empty.
 */
export function diffConfigs(
  previous: { readonly policy: PolicyConfig | null },
  next: { readonly policy: PolicyConfig | null },
  restartKeys: readonly string[],
  limit = MAX_LISTED_CHANGES,
): ConfigDiff {
  const before = configOrigin(previous)?.tree
  const after = configOrigin(next)?.tree
  const found: RawChange[] = []
  if (before !== undefined && after !== undefined) diffTrees(before, after, '', CONFIG_SPEC, found)
  const fromFile = (p: PolicyConfig | null): boolean => p !== null && p.source !== 'inline'
  if (fromFile(previous.policy) && fromFile(next.policy)) {
    diffTrees(policyTree(previous.policy!), policyTree(next.policy!), 'policy_file:', POLICY, found)
  }
  const changes = found.slice(0, limit).map((c) => present(c, restartKeys))
  const notListed = found.length - changes.length
  return {
    changes,
    summary: notListed > 0 ? { changed_keys: found.length, changed_keys_not_listed: notListed } : { changed_keys: found.length },
  }
}

interface RawChange {
  readonly key: string
  /** The key's node in the declarative schema (spec.ts), which says whether its value is a secret. */
  readonly node: TSchema | undefined
  readonly change: 'added' | 'removed' | 'changed'
  readonly from: unknown
  readonly to: unknown
}

const ABSENT = Symbol('absent')

/**
 * Appends every leaf that differs; a key present on one side only is one change holding its whole
 * value. `node` is the schema node of the value at `path`, carried down beside it.
 */
function diffTrees(a: unknown, b: unknown, path: string, node: TSchema | undefined, out: RawChange[]): void {
  if (isMapping(a) && isMapping(b)) {
    const keys = [...Object.keys(a), ...Object.keys(b).filter((k) => !Object.hasOwn(a, k))]
    for (const key of keys) {
      const child = path === '' || path.endsWith(':') ? `${path}${key}` : `${path}.${key}`
      diffTrees(Object.hasOwn(a, key) ? a[key] : ABSENT, Object.hasOwn(b, key) ? b[key] : ABSENT, child, under(node, key), out)
    }
    return
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.max(a.length, b.length); i++)
      diffTrees(i < a.length ? a[i] : ABSENT, i < b.length ? b[i] : ABSENT, join(path, i), under(node, i), out)
    return
  }
  if (a === ABSENT && b === ABSENT) return
  if (a === ABSENT) out.push({ key: path, node, change: 'added', from: undefined, to: b })
  else if (b === ABSENT) out.push({ key: path, node, change: 'removed', from: a, to: undefined })
  else if (JSON.stringify(a) !== JSON.stringify(b)) out.push({ key: path, node, change: 'changed', from: a, to: b })
}

function under(node: TSchema | undefined, key: string | number): TSchema | undefined {
  return node === undefined ? undefined : childOf(node, key)
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** A policy file's rules as the file spells them (the Config says `target` where the file says `tool`). */
function policyTree(policy: PolicyConfig): Record<string, unknown> {
  return {
    default: policy.default,
    filter_lists: policy.filterLists,
    rules: policy.rules.map((rule) => ({
      identity: rule.identity,
      ...(rule.tenant === null ? {} : { tenant: rule.tenant }),
      method: rule.method,
      tool: rule.target,
      server: rule.server,
      effect: rule.effect,
    })),
  }
}

function present(raw: RawChange, restartKeys: readonly string[]): ConfigChange {
  const top = /^[^.[:]*/.exec(raw.key)?.[0] ?? raw.key
  const masking = { masked: false }
  let from = raw.change === 'added' ? undefined : shown(raw.from, raw.node, masking)
  let to = raw.change === 'removed' ? undefined : shown(raw.to, raw.node, masking)
  // A DSN whose password alone changed reads the same on both sides once masked: say it changed, show neither.
  if (raw.change === 'changed' && masking.masked && JSON.stringify(from) === JSON.stringify(to)) from = to = '***'
  return {
    key: raw.key,
    change: raw.change,
    ...(raw.change === 'added' ? {} : { from }),
    ...(raw.change === 'removed' ? {} : { to }),
    restart_needed: restartKeys.includes(top),
    ...(masking.masked ? { masked: true as const } : {}),
  }
}

/** A value safe and short enough to log: secrets masked (keys the schema marks secret, and URL passwords anywhere), long values cut. */
function shown(value: unknown, node: TSchema | undefined, masking: { masked: boolean }): unknown {
  const safe = masked(value, node, masking)
  const json = JSON.stringify(safe) ?? 'null'
  if (json.length <= MAX_VALUE_CHARS) return safe
  return `${json.slice(0, MAX_VALUE_CHARS)}… (${json.length - MAX_VALUE_CHARS} more characters)`
}

function masked(value: unknown, node: TSchema | undefined, masking: { masked: boolean }): unknown {
  const secret = node === undefined ? undefined : metaOf(node).secret
  if (secret !== undefined) {
    masking.masked = true
    // A DSN keeps its host and database, which tell the operator which database it now points at.
    if (secret === 'url' && typeof value === 'string' && URL.canParse(value)) return maskUrlPassword(value, true)
    return '***'
  }
  if (typeof value === 'string') {
    const out = maskUrlPassword(value, false)
    if (out !== value) masking.masked = true
    return out
  }
  if (Array.isArray(value)) return value.map((item, i) => masked(item, under(node, i), masking))
  if (isMapping(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, masked(v, under(node, k), masking)]))
  return value
}

/** `postgres://user:secret@db/x` → `postgres://user:***@db/x`; a DSN's query (`?password=`) is dropped too. */
function maskUrlPassword(text: string, dsn: boolean): string {
  const replaced = maskUrlSecrets(text) // the password, and credential-named query parameters (jwks_url?code=)
  if (!dsn) return replaced
  const q = replaced.indexOf('?')
  return q < 0 ? replaced : `${replaced.slice(0, q)}?***`
}

/** Every secret value in a loaded config's tree (and the password inside each DSN), for the logger to mask wherever it appears. */
export function configSecrets(config: object): string[] {
  const tree = configOrigin(config)?.tree
  const out: string[] = []
  const walk = (value: unknown, node: TSchema | undefined): void => {
    if (typeof value === 'string') {
      if (node === undefined || metaOf(node).secret === undefined) return
      out.push(value)
      // A header value is used trimmed, and `Bearer <token>` may reach a line as the token alone.
      const trimmed = value.trim()
      if (trimmed !== value) out.push(trimmed)
      const credentials = /^\S+\s+(\S.*)$/.exec(trimmed)?.[1]
      if (credentials !== undefined) out.push(credentials)
      if (URL.canParse(value)) {
        const password = new URL(value).password
        if (password !== '') out.push(password, safeDecode(password))
      }
    } else if (Array.isArray(value)) value.forEach((item, i) => walk(item, under(node, i)))
    else if (isMapping(value)) for (const [k, v] of Object.entries(value)) walk(v, under(node, k))
  }
  walk(tree, CONFIG_SPEC)
  return out
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    return text // a stray % in a password: the raw form is already listed
  }
}
