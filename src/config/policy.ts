import type { PolicyConfig } from './types'
import type { Reader } from './reader'

// TODO(#5): read the inline `policy:` block or `policy_file`; until then neither may be set.
export function readPolicy(r: Reader, inline: unknown, file: unknown, _resolvePath: (p: string) => string): PolicyConfig | null {
  if (inline !== undefined) r.note('policy', 'is not supported yet')
  if (file !== undefined) r.note('policy_file', 'is not supported yet')
  return null
}
