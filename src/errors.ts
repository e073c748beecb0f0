/**
 * The one list of failure codes. A refusal (bad token, over budget, denied) is not an error: stages
 * return it as a value. A failure is thrown as a WardlineError; its code goes to logs, audit reasons
 * and tests, never to the caller, who sees only the HTTP status below.
 */
export type ErrorCode =
  | 'WL_CONFIG_INVALID'
  | 'WL_BUDGET_STORE_FAILED'
  | 'WL_UPSTREAM_UNREACHABLE'
  | 'WL_UPSTREAM_TIMEOUT'
  | 'WL_UPSTREAM_FAILED'
  | 'WL_AUTH_KEYS_UNAVAILABLE'
  | 'WL_POSTGRES_UNAVAILABLE'
  | 'WL_AUDIT_BACKPRESSURE'
  | 'WL_LISTEN_FAILED'
  | 'WL_INTERNAL'

export const STATUS: Readonly<Record<ErrorCode, number>> = {
  WL_CONFIG_INVALID: 500,
  WL_BUDGET_STORE_FAILED: 503,
  WL_UPSTREAM_UNREACHABLE: 502,
  WL_UPSTREAM_TIMEOUT: 504,
  WL_UPSTREAM_FAILED: 502,
  // Never reaches the gateway as a failure: the JWT authenticator turns it into a 401 refusal with its
  // challenge (RFC 6750 invalid_token). Listed so the code has a status like every other.
  WL_AUTH_KEYS_UNAVAILABLE: 401,
  WL_POSTGRES_UNAVAILABLE: 503,
  // Answered as a refusal by the audit reservation stage (no stack trace per call while the audit
  // queue is full); listed for its status and so the code is one of the list.
  WL_AUDIT_BACKPRESSURE: 503,
  // A listener that cannot bind (address in use, no permission) stops startup: no caller ever sees it.
  WL_LISTEN_FAILED: 500,
  WL_INTERNAL: 500,
}

export class WardlineError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options)
    this.name = new.target.name
  }

  get status(): number {
    return STATUS[this.code]
  }
}

/** Every problem found in a configuration, each prefixed with its key path. */
export class ConfigError extends WardlineError {
  constructor(readonly problems: readonly string[]) {
    super('WL_CONFIG_INVALID', `invalid configuration:\n  ${problems.join('\n  ')}`)
  }
}

/** A short, single-line description of any thrown value, with its cause chain, for reasons and logs. */
export function describeError(err: unknown): string {
  const parts: string[] = []
  let current: unknown = err
  for (let depth = 0; current !== undefined && current !== null && depth < 4; depth++) {
    // Duck-typed, not instanceof: errors from another realm (undici's under jest, vm contexts) are
    // still errors, and losing their message and cause would hide what failed.
    if (typeof current === 'object' && typeof (current as Error).message === 'string') {
      const e = current as Error
      const code = (e as { code?: unknown }).code
      const text = e.message || e.name
      parts.push(typeof code === 'string' && !text.includes(code) ? `${text} (${code})` : text)
      current = (e as { cause?: unknown }).cause
    } else {
      // eslint-disable-next-line @typescript-eslint/no-base-to-string -- any thrown value lands here: String() gives a primitive's text or an object's own toString(), and a plain object has nothing better to show
      parts.push(String(current))
      break
    }
  }
  const seen = new Set<string>()
  return parts
    .filter((p) => !seen.has(p) && seen.add(p))
    .join(': ')
    .replace(/\s+/g, ' ')
}
