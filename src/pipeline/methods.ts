/**
 * What the gateway knows about JSON-RPC methods and names, shared by the parser (which marks calls as
 * gated), the policy (which rules may name them) and the auth stage (which checks identities), so the
 * three can never disagree.
 */

/**
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
 * C0, DEL and C1 controls. No legitimate identity, tenant, method, tool name, prompt name or URI holds
 * one, and all of them end up in audit lines, logs and database rows (Postgres text refuses NUL).
 */
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/

export function hasControlCharacters(text: string): boolean {
  return CONTROL_CHARACTERS.test(text)
}

/** JSON-RPC 2.0 §5.1 codes for bodies that are not valid JSON-RPC; every other local answer uses its status. */
export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600
