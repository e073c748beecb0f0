import { configOrigin } from './origin'
import { policyText } from './policy'
import { schemaKeys } from './schema'
import { CONFIG_SPEC, keyNode, metaOf } from './spec'
import type { PolicyConfig } from './types'

/**
 * An enforcement key a reload may not lose without saying so. `paths` are alternatives (the policy
 * is inline or in a file): the key is lost when the running file set one of them and the new file
 * sets none. `removeWith` is how an operator writes the removal so that it cannot be a cut.
 */
interface GuardedKey {
  readonly paths: readonly (readonly string[])[]
  readonly removeWith: string
}

/**
 * Every key whose disappearance turns enforcement off or loosens it: the keys the declarative schema
 * (spec.ts) marks `guard`, in its order, which is the order of the docs' key table. A file read
 * while it is being written (`cat new > wardline.yaml`, an editor that truncates then writes) is
 * valid YAML cut after any line: the keys after the cut are absent, and the key on the last whole
 * line may be blank (`policy:` with nothing after it reads as null). A cut can never write a value,
 * so a key written out (`policy: {default: allow, rules: []}`, `budget: {}`, `budget_enforcement:
 * false`, `allowed_hosts: []`) is the operator's own.
 */
const GUARDED: readonly GuardedKey[] = schemaKeys().flatMap(({ pattern, node }) => {
  const guard = metaOf(node).guard
  if (guard === undefined) return []
  // A key inside a list or a mapping of names has no one place to compare.
  if (/[*[]/.test(pattern)) throw new Error(`${pattern}: only a key at a fixed path can be guarded`)
  const path = pattern.split('.')
  const siblings = (guard.or ?? []).map((key) => [...path.slice(0, -1), key])
  return [{ paths: [path, ...siblings], removeWith: guard.removeWith }]
})

/** How to remove the policy on purpose, for a config without a tree to compare. */
const POLICY_REMOVE_WITH = metaOf(keyNode(CONFIG_SPEC, 'policy')).guard!.removeWith

/**
 * The problems that make a reload refuse `next`, each with how to do it on purpose:
 * - an enforcement key the running file sets that the new file lacks or leaves blank;
 * - a policy whose rules the running one had and the new one leaves out (`rules:` cut off, inline or
 *   in the policy file): the rules are what a policy enforces, and `default:` usually comes first;
 * - a file (the config, or the policy file) that does not end with a line break, as one read while it
 *   is still being written does, cut inside any line (`window_seconds: 60` read as `6`);
 * - a file that moved between `upstream:` and `servers:`, which only a restart can apply.
 * A file cut short inside `servers:` that leaves a server without its url, or loses the whole block
 * with no `upstream:`, is invalid. One cut between two servers drops the later ones and every key
 * after the block, which the guarded keys catch when they follow it; when `servers:` is the file's
 * last block, the dropped servers' callers get 404 until the file is whole: lost service, never lost
 * enforcement, so it is not refused (and a write + rename never shows it).
 * Empty when nothing looks lost or cut. Without a tree to compare (a config not made by the loader),
 * only a lost policy is checked.
 */
export function enforcementLost(
  previous: { readonly policy: PolicyConfig | null; readonly upstream?: unknown },
  next: { readonly policy: PolicyConfig | null; readonly upstream?: unknown },
): string[] {
  const out = looksCut(previous.policy, next.policy)
  const switched = kindSwitched(previous, next)
  if (switched !== null) out.push(switched)
  const origin = configOrigin(next)
  const before = configOrigin(previous)?.tree
  const after = origin?.tree
  if (origin?.unterminated) out.push(unterminated(origin.file ?? 'the configuration text'))
  if (before === undefined || after === undefined) {
    if (previous.policy !== null && next.policy === null) out.push(problem('policy', POLICY_REMOVE_WITH))
    return out
  }
  for (const key of GUARDED) {
    const had = key.paths.find((path) => isSet(at(before, path)))
    if (had !== undefined && key.paths.every((path) => isBlank(at(after, path)))) out.push(problem(had.join('.'), key.removeWith))
  }
  return out
}

/**
 * A file moved between `upstream:` (one server, every path) and `servers:` (several by name). Applied
 * in part, it would be incoherent: the running routes stay, while the budget's `<server>/<tool>` keys
 * and the policy's `server:` rules are written for the other shape and would match nothing there. So
 * nothing of it is applied: the shape is chosen at startup.
 */
function kindSwitched(previous: { readonly upstream?: unknown }, next: { readonly upstream?: unknown }): string | null {
  if (previous.upstream === undefined || next.upstream === undefined) return null
  const kind = (c: { readonly upstream?: unknown }): string => (c.upstream === null ? 'servers:' : 'upstream:')
  if (kind(previous) === kind(next)) return null
  return (
    `upstream: the running gateway serves ${kind(previous)} and the file sets ${kind(next)} instead: moving between the two ` +
    `needs a restart (routes, budgets and policy change shape together), so nothing of the file was applied. Restart to apply it`
  )
}

/** The policy's own text: its rules left out where the running policy has some, or its file unterminated. */
function looksCut(previous: PolicyConfig | null, next: PolicyConfig | null): string[] {
  const text = next === null ? null : policyText(next)
  if (next === null || text === null) return []
  const out: string[] = []
  if (text.unterminated) out.push(unterminated(next.source))
  if (previous !== null && previous.rules.length > 0 && next.rules.length === 0 && !text.rulesWritten) {
    out.push(problem(next.source === 'inline' ? 'policy.rules' : `${next.source}: rules`, 'rules: []'))
  }
  return out
}

function unterminated(file: string): string {
  return (
    `${file}: does not end with a line break, as a file read while it is still being written does (write it with ` +
    `write + rename). End it with a newline to apply it; or restart to apply the file as it is`
  )
}

function problem(key: string, removeWith: string): string {
  return (
    `${key}: set in the running configuration, missing or blank in the file (what a file cut short by a write in ` +
    `progress reads as; write it with write + rename). To remove it on purpose, write ${removeWith}; or restart to apply the file as it is`
  )
}

/** The value at a key path of a YAML tree, or undefined. */
function at(tree: unknown, path: readonly string[]): unknown {
  let node = tree
  for (const key of path) {
    if (typeof node !== 'object' || node === null || Array.isArray(node) || !Object.hasOwn(node, key)) return undefined
    node = (node as Record<string, unknown>)[key]
  }
  return node
}

/** What a cut leaves of a key: nothing, or the key with nothing after it. */
function isBlank(value: unknown): boolean {
  return value === undefined || value === null
}

/** Set to something a missing key does not already mean: `false`, `[]` and `{}` read as absent do. */
function isSet(value: unknown): boolean {
  if (value === undefined || value === null || value === false) return false
  if (Array.isArray(value)) return value.length > 0
  return !(typeof value === 'object' && Object.keys(value).length === 0)
}
