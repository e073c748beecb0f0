import { GATED_METHODS } from '../mcp/methods'
import type { Effect, PolicyConfig, PolicyRule } from '../config/types'
import { Glob } from '../glob'

/** The three things a rule names besides its method, in the order the lookup maps nest them. */
const IDENTITY = 0
const TENANT = 1
const TARGET = 2

/** Table keys for gated methods no rule can name exactly (a future `resources/…`): only families reach them. */
const OTHER_RESOURCES = 'resources/'
const OTHER_PROMPTS = 'prompts/'

/** One rule, its patterns compiled once. */
class Entry {
  constructor(
    readonly index: number,
    private readonly identity: Glob,
    /** null: any tenant. */
    private readonly tenant: Glob | null,
    readonly target: Glob,
  ) {}

  matches(identity: string, tenant: string, target: string): boolean {
    return this.caller(identity, tenant) && this.target.matches(target)
  }

  caller(identity: string, tenant: string): boolean {
    return this.identity.matches(identity) && (this.tenant === null || this.tenant.matches(tenant))
  }
}

type Node = Map<string, unknown> | Entry[]

/**
 * The rules of one method that share which of identity, tenant and target are exact (no `*`), nested
 * Maps keyed by those exact values, in that order; a leaf lists its rules by ascending index. A call
 * walks one path of Map lookups and then checks only the rules at the leaf, so a thousand rules about
 * other identities or tools cost nothing.
 */
class Category {
  readonly root: Node
  /** The lowest rule index anywhere in this category, to probe the likeliest winners first. */
  lowest = Number.MAX_SAFE_INTEGER

  constructor(readonly dims: readonly number[]) {
    this.root = dims.length === 0 ? [] : new Map()
  }

  add(entry: Entry, keys: readonly string[]): void {
    let node = this.root
    for (let i = 0; i < this.dims.length; i++) {
      const map = node as Map<string, unknown>
      const key = keys[this.dims[i]]
      let next = map.get(key) as Node | undefined
      if (next === undefined) {
        next = i === this.dims.length - 1 ? [] : new Map()
        map.set(key, next)
      }
      node = next
    }
    ;(node as Entry[]).push(entry)
    if (entry.index < this.lowest) this.lowest = entry.index
  }

  leaf(identity: string, tenant: string, target: string): Entry[] | undefined {
    let node: Node | undefined = this.root
    for (let i = 0; i < this.dims.length; i++) {
      const dim = this.dims[i]
      node = (node as Map<string, unknown>).get(dim === IDENTITY ? identity : dim === TENANT ? tenant : target) as Node | undefined
      if (node === undefined) return undefined
    }
    return node as Entry[]
  }
}

const NO_CATEGORIES: readonly Category[] = []

/**
 * Whether a rule's `server:` covers the route a policy is compiled for. Null is the one `upstream:`,
 * which has no name: only `*` covers it (config/policy.ts refuses anything else there).
 */
function coversServer(pattern: string, server: string | null): boolean {
  const glob = new Glob(pattern)
  return glob.any || (server !== null && glob.matches(server))
}

/**
 * A policy turned into lookup maps at load time (docs/principles.md, "Smaller rules": the hot path does its work at load time). First match
 * wins: each category yields its first matching rule, and the lowest index among them is the answer;
 * a category stops scanning as soon as its rules come after the best match found so far.
 *
 * Cost per decision: one Map lookup for the method, then for each kind of rule in use (at most eight:
 * which of identity, tenant, target are exact) up to three Map lookups and a scan of the rules that
 * share those exact values. Only rules with `*` in the same places and the same exact values are
 * scanned one by one (docs/policy.md, "Limits").
 */
export class CompiledPolicy {
  readonly defaultEffect: Effect
  readonly rules: readonly PolicyRule[]
  /** False when no call can be denied (default allow, no deny rule): then no list needs filtering. */
  readonly canDeny: boolean
  private readonly entries: readonly Entry[]
  /** By rule index: whether the rule's `server:` covers this policy's server. */
  private readonly applies: readonly boolean[]
  private readonly byMethod = new Map<string, readonly Category[]>()
  private readonly otherResources: readonly Category[]
  private readonly otherPrompts: readonly Category[]

  /**
   * `server`: the route this policy judges for (its name in `servers:`, null for the one `upstream:`).
   * Each route compiles its own copy, so a rule whose `server:` does not cover the route is left out
   * of every table here: the server costs nothing per call, and a thousand rules about other servers
   * are never scanned. Rule indexes stay those of the whole rule set (`rule 3` in the audit reason).
   */
  constructor(
    policy: PolicyConfig,
    readonly server: string | null = null,
  ) {
    this.defaultEffect = policy.default
    this.rules = policy.rules
    const applies = policy.rules.map((rule) => coversServer(rule.server, server))
    this.applies = applies
    this.canDeny = policy.default === 'deny' || policy.rules.some((rule, i) => applies[i] && rule.effect === 'deny')
    const entries = policy.rules.map(
      (rule, i) => new Entry(i, new Glob(rule.identity), rule.tenant === null ? null : new Glob(rule.tenant), new Glob(rule.target)),
    )
    this.entries = entries
    const own = (method: string): readonly Category[] => buildTable(policy.rules, entries, applies, method)
    for (const method of GATED_METHODS) this.byMethod.set(method, own(method))
    this.otherResources = own(OTHER_RESOURCES)
    this.otherPrompts = own(OTHER_PROMPTS)
  }

  /** The index of the first rule matching this call, or -1 when none does (the default applies). */
  match(identity: string, tenant: string, method: string, target: string): number {
    const categories =
      this.byMethod.get(method) ??
      (method.startsWith(OTHER_RESOURCES) ? this.otherResources : method.startsWith(OTHER_PROMPTS) ? this.otherPrompts : NO_CATEGORIES)
    let best = Number.MAX_SAFE_INTEGER
    for (let c = 0; c < categories.length; c++) {
      const category = categories[c]
      if (category.lowest >= best) break // sorted by `lowest`: no later category can hold an earlier rule
      const leaf = category.leaf(identity, tenant, target)
      if (leaf === undefined) continue
      for (let i = 0; i < leaf.length; i++) {
        const entry = leaf[i]
        if (entry.index >= best) break
        if (entry.matches(identity, tenant, target)) {
          best = entry.index
          break
        }
      }
    }
    return best === Number.MAX_SAFE_INTEGER ? -1 : best
  }

  /**
   * Whether this call would be allowed for every target of a family: literal `parts` with any text
   * between each two (uri-template.ts, an expansion with holes). Rule by rule, in order, as first match
   * wins: a rule that surely matches every target decides; a deny rule that may match some target
   * denies (sound: never says allowed when some target is not). A scan of every rule, for the rare
   * answers that need it (a completion value whose template has variables nobody gave).
   */
  allowsEvery(identity: string, tenant: string, method: string, parts: readonly string[]): boolean {
    if (parts.length === 1) return this.effectOf(this.match(identity, tenant, method, parts[0])) === 'allow'
    for (let i = 0; i < this.rules.length; i++) {
      const rule = this.rules[i]
      const entry = this.entries[i]
      if (!this.applies[i] || !covers(rule.method, method) || !entry.caller(identity, tenant)) continue
      if (entry.target.coversEvery(parts)) return rule.effect === 'allow'
      if (rule.effect === 'deny' && entry.target.meetsSome(parts)) return false
    }
    return this.defaultEffect === 'allow'
  }

  /** The effect for a match() result. */
  effectOf(index: number): Effect {
    return index < 0 ? this.defaultEffect : this.rules[index].effect
  }
}

export function compilePolicy(policy: PolicyConfig, server: string | null = null): CompiledPolicy {
  return new CompiledPolicy(policy, server)
}

/** Does a rule's method (exact, a family, or `*`) cover this table's method? */
function covers(ruleMethod: string, method: string): boolean {
  if (ruleMethod === '*' || ruleMethod === method) return true
  return ruleMethod.endsWith('/*') && method.startsWith(ruleMethod.slice(0, -1))
}

function buildTable(
  rules: readonly PolicyRule[],
  entries: readonly Entry[],
  applies: readonly boolean[],
  method: string,
): readonly Category[] {
  const byMask = new Map<number, Category>()
  for (let i = 0; i < rules.length; i++) {
    const rule = rules[i]
    if (!applies[i] || !covers(rule.method, method)) continue
    const exact = [!rule.identity.includes('*'), rule.tenant !== null && !rule.tenant.includes('*'), !rule.target.includes('*')]
    const mask = (exact[IDENTITY] ? 1 : 0) | (exact[TENANT] ? 2 : 0) | (exact[TARGET] ? 4 : 0)
    let category = byMask.get(mask)
    if (category === undefined) {
      category = new Category([IDENTITY, TENANT, TARGET].filter((dim) => exact[dim]))
      byMask.set(mask, category)
    }
    category.add(entries[i], [rule.identity, rule.tenant ?? '', rule.target])
  }
  return [...byMask.values()].sort((a, b) => a.lowest - b.lowest)
}
