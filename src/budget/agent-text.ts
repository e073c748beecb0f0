import { quotedName } from '../escape'
import type { BucketKind } from './store'

/** What a throttled single call's text for a model says (tool_refusals: result). */
export interface ThrottleFacts {
  readonly kind: BucketKind
  /** The tool called, as the caller named it (the text shows it through quotedName). */
  readonly tool: string
  /** The server called (`servers:`), named when its bucket refused; null with `upstream:`. */
  readonly server?: string | null
  readonly limit: number
  readonly windowSeconds: number
  /** Units this call costs (its tool's cost). */
  readonly cost: number
  /** Some tool costs more than 1: limits are spoken of in units, not calls. */
  readonly weighted: boolean
  readonly retryAfterSeconds: number
  /** The call costs more than the window allows: waiting never helps. */
  readonly never: boolean
}

/**
 * The refusal as a model reads it: which limit, and when or whether to retry. Only what the caller
 * may know: its own identity's and tenant's limits (never whose calls used them) and a tool's limit;
 * no counts of other callers, no bucket keys. The tool's name is the caller's: quoted, escaped and cut
 * (quotedName), so a name cannot add lines or instructions of its own to the text.
 */
export function throttledAgentText(f: ThrottleFacts): string {
  const tool = `tool ${quotedName(f.tool)}`
  if (f.kind === 'repeat') {
    return (
      `Loop breaker: this exact call (${tool} with the same arguments) was already made ${f.limit} ` +
      `${f.limit === 1 ? 'time' : 'times'} in ${span(f.windowSeconds)}, the most allowed. Do not repeat it: change the ` +
      `arguments or your approach. The same call is accepted again in ${wait(f.retryAfterSeconds)}.`
    )
  }
  // A server's bucket is a quota every caller of it shares, like a tool's: said the same way.
  const server = `MCP server ${quotedName(f.server ?? '')}`
  const owner = f.kind === 'tool' ? tool : f.kind === 'server' ? server : f.kind === 'tenant' ? 'your tenant' : 'your identity'
  if (f.never) {
    return (
      `This call costs ${units(f.cost)}, more than the ${units(f.limit)} per ${per(f.windowSeconds)} that ${owner} ` +
      'is allowed: it can never succeed. Do not retry it.'
    )
  }
  const allowed = f.weighted ? units(f.limit) : calls(f.limit)
  const limit =
    f.kind === 'tool' || f.kind === 'server'
      ? `${allowed} per ${per(f.windowSeconds)} for ${owner}${f.kind === 'server' ? ', shared by all its callers' : ''}.${f.weighted ? ` This call costs ${units(f.cost)}.` : ''}`
      : `${owner}'s limit of ${allowed} per ${per(f.windowSeconds)} ` +
        (f.weighted ? `has no room left for this call, which costs ${units(f.cost)}.` : 'is used up.')
  return `Rate limit: ${limit} Try again in ${wait(f.retryAfterSeconds)}.`
}

function units(n: number): string {
  return n === 1 ? '1 unit' : `${n} units`
}

function calls(n: number): string {
  return n === 1 ? '1 call' : `${n} calls`
}

/** A window's length as people say it: 60 s, 5 min, 2 h, 1 day (exact: it states a limit). */
function span(seconds: number): string {
  if (seconds % 86_400 === 0) return seconds === 86_400 ? '1 day' : `${seconds / 86_400} days`
  if (seconds % 3600 === 0) return `${seconds / 3600} h`
  if (seconds >= 120 && seconds % 60 === 0) return `${seconds / 60} min`
  return `${seconds} s`
}

/** "per day", "per hour", "per 60 s". */
function per(seconds: number): string {
  return seconds === 86_400 ? 'day' : seconds === 3600 ? 'hour' : span(seconds)
}

/** A wait, rounded up to the unit shown: a model that waits this long finds the window reset. */
function wait(seconds: number): string {
  if (seconds < 120) return `${seconds} s`
  if (seconds < 7200) return `${Math.ceil(seconds / 60)} min`
  if (seconds < 172_800) return `${Math.ceil(seconds / 3600)} h`
  return `${Math.ceil(seconds / 86_400)} days`
}
