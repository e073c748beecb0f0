/**
 * The MCP methods that act on a target (architecture.md: a tool name, a prompt name or a resource URI),
 * shared by the parser (which marks calls as gated and reads their target) and the policy (whose
 * rules may name them), so the two can never disagree.
 *
 * The gated methods by name (MCP 2025-06-18: Tools, Resources, Prompts). Any other `resources/…` or
 * `prompts/…` method is gated too (isGatedMethod); a policy reaches those through `resources/*` and
 * `prompts/*`.
 */
export const GATED_METHODS: readonly string[] = [
  'tools/call',
  'resources/list',
  'resources/templates/list',
  'resources/read',
  'resources/subscribe',
  'resources/unsubscribe',
  'prompts/list',
  'prompts/get',
]

export function isGatedMethod(method: string): boolean {
  return method === 'tools/call' || method.startsWith('resources/') || method.startsWith('prompts/')
}

/**
 * `completion/complete` suggests argument values for a prompt or a resource template named in its
 * `params.ref` (MCP 2025-11-25, Completion). It is judged as the call it completes, by the same
 * target, so no rule names it: a caller that may not get a prompt may not learn what its arguments
 * take either. The field is where the ref names its target; `judgedAs` is a method of GATED_METHODS.
 */
export const COMPLETION_REFS: ReadonlyMap<string, { readonly field: 'name' | 'uri'; readonly judgedAs: string }> = new Map([
  ['ref/prompt', { field: 'name', judgedAs: 'prompts/get' }],
  ['ref/resource', { field: 'uri', judgedAs: 'resources/read' }],
])
