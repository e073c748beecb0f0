import { GATED_METHODS } from '../mcp/methods'
import { Glob } from '../glob'
import { didYouMean } from './did-you-mean'
import type { TSchema } from '@sinclair/typebox'
import type { PolicyConfig, PolicyRule } from './types'
import { isUnterminated } from './origin'
import { Reader, join, parseYaml, readText } from './reader'
import { readBlock, readKey, readLeaf } from './read-node'
import { POLICY, keyNode, keysOf, metaOf } from './spec'

const RULE = (POLICY.properties.rules as unknown as { items: TSchema }).items

/**
 * A rule names a gated method exactly (GATED_METHODS) or a family. A name outside the list is far more
 * likely a typo than a method from the future, and a typo in a deny rule would silently deny nothing;
 * `resources/*` and `prompts/*` cover methods that do not exist yet.
 */
/** Method patterns a rule may use besides the exact names: every gated method, or one family. */
export const METHOD_FAMILIES: readonly string[] = ['*', 'resources/*', 'prompts/*']
/** An omitted method means tools/call: most policies are about tools (the rule's `method` default in spec.ts). */
export const DEFAULT_METHOD = (keyNode(RULE, 'method') as unknown as { default: string }).default
/** An omitted server means every server: the rule set is one, and most rules are about callers and tools. */
export const ANY_SERVER = (keyNode(RULE, 'server') as unknown as { default: string }).default

/**
 * The rules' `server:` keys against the servers the config routes to, every problem noted at once.
 * With `upstream:` alone there is no server name to match: a rule naming one would silently never
 * apply (a deny rule that denies nothing), so anything but `*` is refused. With `servers:`, a name
 * without `*` that is not a server is a typo or a removed server: refused the same way, with the
 * closest names. A glob that matches no server today is allowed (it may be meant for servers yet to
 * come): configWarnings says so.
 */
export function checkPolicyServers(r: Reader, policy: PolicyConfig | null, serverNames: readonly string[] | null): void {
  if (policy === null) return
  const at = (i: number): string => (policy.source === 'inline' ? `policy.rules[${i}].server` : `${policy.source}: rules[${i}].server`)
  policy.rules.forEach((rule, i) => {
    if (rule.server === ANY_SERVER) return
    if (serverNames === null) {
      r.note(at(i), 'is only used with servers: (with upstream: alone there is one server): remove the key or write *')
      return
    }
    if (rule.server.includes('*') || serverNames.includes(rule.server)) return
    const guesses = didYouMean(rule.server, serverNames)
    const guess = guesses.length === 0 ? '' : `, did you mean ${guesses.join(' or ')}?`
    r.note(at(i), `names no server in servers:${guess} (servers: ${serverNames.join(', ')})`)
  })
}

/** The rules whose `server:` glob matches no server in `serverNames`, as warnings (see checkPolicyServers). */
export function policyServerWarnings(policy: PolicyConfig | null, serverNames: readonly string[]): string[] {
  if (policy === null || serverNames.length === 0) return []
  const out: string[] = []
  policy.rules.forEach((rule, i) => {
    if (!rule.server.includes('*')) return
    const glob = new Glob(rule.server)
    if (serverNames.some((name) => glob.matches(name))) return
    const where = policy.source === 'inline' ? `policy.rules[${i}].server` : `${policy.source}: rules[${i}].server`
    out.push(
      `${where}: ${JSON.stringify(rule.server)} matches no server in servers: (${serverNames.join(', ')}): the rule applies to no call`,
    )
  })
  return out
}

/**
 * Reads the policy from the inline `policy:` block or from `policy_file` (one of the two). Neither
 * means no policy: every call is allowed and compose says so at startup. Problems in a policy file
 * are prefixed with the file's path, inline ones with `policy.`, each with its rule index.
 */
export function readPolicy(
  r: Reader,
  inline: unknown,
  file: unknown,
  resolvePath: (p: string) => string,
  at: { readonly inline: string; readonly file: string } = { inline: 'policy', file: 'policy_file' },
): PolicyConfig | null {
  if (inline !== undefined && file !== undefined) {
    r.note(at.file, 'cannot be used together with an inline policy: keep one of the two')
    return null
  }
  if (inline !== undefined) {
    if (inline === null || typeof inline !== 'object' || Array.isArray(inline)) {
      r.note(at.inline, 'must be a mapping with default and rules')
      return null
    }
    return readPolicyTree(r, inline, at.inline, 'inline')
  }
  if (file === undefined) return null
  // `policy_file:` with nothing after it is a mistake, not a wish to run without a policy (which is
  // what removing the key says): failing open on a blank line would allow every call.
  if (file === null) {
    r.note(at.file, 'is empty: give the path of a policy file, or remove the key to run without a policy')
    return null
  }
  const name = r.string(file, at.file, '', { nonEmpty: true })
  if (name === '') return null
  return readPolicyFile(r, resolvePath(name), at.file)
}

/**
 * How a policy read as text, beside it (never in it: the PolicyConfig stays the plain shape stages
 * read), for the reload guard (config/reload-guard.ts): whether `rules:` was written out (a file cut
 * before its rules reads as a policy without any), and whether the policy file ends without a line
 * break (a file still being written). Frozen policies are keys, as in config/origin.ts.
 */
export interface PolicyText {
  readonly rulesWritten: boolean
  readonly unterminated: boolean
}

const POLICY_TEXT = new WeakMap<object, PolicyText>()

/** How `policy` read as text; null for a policy built by hand. */
export function policyText(policy: PolicyConfig): PolicyText | null {
  return POLICY_TEXT.get(policy) ?? null
}

/** A policy file holds the same mapping as the inline block. Taken literally: no ${VAR} expansion. */
export function readPolicyFile(r: Reader, path: string, key = 'policy_file'): PolicyConfig | null {
  const file = readText(path)
  if ('problem' in file) {
    r.note(key, `${path} ${file.problem}`)
    return null
  }
  const parsed = parseYaml(file.text)
  if ('problem' in parsed) {
    r.note(path, parsed.problem)
    return null
  }
  const tree = parsed.tree
  if (tree === null || typeof tree !== 'object' || Array.isArray(tree)) {
    r.note(path, 'must be a mapping with default and rules')
    return null
  }
  // Read with paths relative to the file, then prefix each problem with the file's path, so the
  // operator reads `/etc/wardline/policy.yaml: rules[3].effect: must be allow or deny`.
  const inner = new Reader()
  const policy = readPolicyTree(inner, tree, '', path)
  for (const problem of inner.problems) r.note(path, problem)
  const read = POLICY_TEXT.get(policy)
  if (read !== undefined) POLICY_TEXT.set(policy, { ...read, unterminated: isUnterminated(file.text) })
  return policy
}

function readPolicyTree(r: Reader, tree: object, base: string, source: string): PolicyConfig {
  const o = readBlock(r, POLICY, tree, base)
  const defaultPath = join(base, 'default')
  if (o.default === undefined || o.default === null) r.note(defaultPath, 'is required (allow or deny)')
  const defaultEffect = readKey(r, POLICY, o, 'default', base, 'deny')
  const rulesPath = join(base, 'rules')
  const rules = r.list(o.rules, rulesPath).map((node, i) => readRule(r, node, join(rulesPath, i)))
  // Lists show a caller only what it may use unless the operator turns it off (docs/policy.md).
  const filterLists = readKey(r, POLICY, o, 'filter_lists', base)
  const policy = { default: defaultEffect, rules, source, filterLists }
  POLICY_TEXT.set(policy, { rulesWritten: o.rules !== undefined && o.rules !== null, unterminated: false })
  return policy
}

function readRule(r: Reader, node: unknown, path: string): PolicyRule {
  if (node === null || typeof node !== 'object' || Array.isArray(node)) {
    r.note(path, 'must be a mapping with identity, tool and effect')
    return { identity: '', tenant: null, method: DEFAULT_METHOD, target: '', server: ANY_SERVER, effect: 'deny' }
  }
  const o = readBlock(r, RULE, node, path)
  // The keys the schema marks required (identity, tool, effect), in its order.
  for (const key of keysOf(RULE)) {
    if (metaOf(keyNode(RULE, key)).required && (o[key] === undefined || o[key] === null)) r.note(join(path, key), 'is required')
  }
  const methodPath = join(path, 'method')
  const method = readLeaf(r, keyNode(RULE, 'method'), o.method, methodPath) as string
  if (!GATED_METHODS.includes(method) && !METHOD_FAMILIES.includes(method)) {
    r.note(methodPath, `must be one of ${[...GATED_METHODS, ...METHOD_FAMILIES].join(', ')}`)
  }
  return {
    identity: readLeaf(r, keyNode(RULE, 'identity'), o.identity, join(path, 'identity')) as string,
    tenant: readLeaf(r, keyNode(RULE, 'tenant'), o.tenant, join(path, 'tenant')) as string | null,
    method,
    target: readLeaf(r, keyNode(RULE, 'tool'), o.tool, join(path, 'tool')) as string,
    server: readLeaf(r, keyNode(RULE, 'server'), o.server, join(path, 'server')) as string,
    effect: readLeaf(r, keyNode(RULE, 'effect'), o.effect, join(path, 'effect'), 'deny') as PolicyRule['effect'],
  }
}
