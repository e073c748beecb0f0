import { configOrigin } from './origin'

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
 * Every key whose disappearance turns enforcement off or loosens it. A file read while it is being
 * written (`cat new > wardline.yaml`, an editor that truncates then writes) is valid YAML cut after
 * any line: the keys after the cut are absent, and the key on the last whole line may be blank
 * (`policy:` with nothing after it reads as null). A cut can never write a value, so a key written
 * out (`policy: {default: allow}`, `budget: {}`, `budget_enforcement: false`, `allowed_hosts: []`)
 * is the operator's own.
 */
const GUARDED: readonly GuardedKey[] = [
  { paths: [['policy'], ['policy_file']], removeWith: 'policy: {default: allow}' },
  { paths: [['budget']], removeWith: 'budget: {}' },
  { paths: [['auth']], removeWith: 'an auth block (a gateway always authenticates)' },
  { paths: [['features', 'budget_enforcement']], removeWith: 'features: {budget_enforcement: false}' },
  { paths: [['features', 'postgres_storage']], removeWith: 'features: {postgres_storage: false}' },
  { paths: [['allowed_hosts']], removeWith: 'allowed_hosts: []' },
]

/**
 * The problems that make a reload refuse `next`: each enforcement key the running file sets that the
 * new file lacks or leaves blank, with how to remove it on purpose. Empty when nothing was lost, or
 * when either config was not made by the loader (no tree to compare: only the policy is checked).
 */
export function enforcementLost(previous: { readonly policy: object | null }, next: { readonly policy: object | null }): string[] {
  const before = configOrigin(previous)?.tree
  const after = configOrigin(next)?.tree
  if (before === undefined || after === undefined) {
    return previous.policy !== null && next.policy === null ? [problem('policy', GUARDED[0].removeWith)] : []
  }
  const out: string[] = []
  for (const key of GUARDED) {
    const had = key.paths.find((path) => isSet(at(before, path)))
    if (had !== undefined && key.paths.every((path) => isBlank(at(after, path)))) out.push(problem(had.join('.'), key.removeWith))
  }
  return out
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
