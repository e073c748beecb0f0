import { userInfo } from 'node:os'
import type { AdminConfig } from '../config/types'

/** Why an admin call did not get an answer it could use; `message` is what the CLI prints. */
export class AdminClientError extends Error {
  constructor(
    message: string,
    /** The HTTP status, when the API answered. */
    readonly status: number | null = null,
  ) {
    super(message)
    this.name = 'AdminClientError'
  }
}

/**
 * Where to reach the admin API from this host: admin.listen, with a wildcard host (0.0.0.0, ::) read
 * as the loopback address of its family (a listener on every interface is on loopback too).
 */
export function adminBaseUrl(admin: AdminConfig): string {
  const { host, port } = admin.listen
  const reach = host === '0.0.0.0' || host === '*' ? '127.0.0.1' : host === '::' ? '::1' : host
  return `http://${reach.includes(':') ? `[${reach}]` : reach}:${port}`
}

export interface AdminCall {
  readonly method: 'GET' | 'POST' | 'DELETE'
  /** Path and query, e.g. `/budgets?identity=alice`. */
  readonly path: string
  readonly body?: unknown
  readonly timeoutMs?: number
}

/**
 * Calls the admin API with the configured token and returns the JSON answer of a 2xx. Anything else
 * is an AdminClientError saying what to check: the gateway not running or not reachable, the token
 * refused, or the API's own message for a refused request.
 */
export async function callAdmin(baseUrl: string, token: string, call: AdminCall): Promise<unknown> {
  const timeoutMs = call.timeoutMs ?? 10_000
  let res: Response
  try {
    res = await fetch(`${baseUrl}${call.path}`, {
      method: call.method,
      headers: {
        authorization: `Bearer ${token}`,
        'x-wardline-operator': operatorName(),
        ...(call.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal: AbortSignal.timeout(timeoutMs),
    })
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } }
    if (e.name === 'TimeoutError') throw new AdminClientError(`the admin API at ${baseUrl} did not answer within ${timeoutMs / 1000} s`)
    const code = e.cause?.code ?? e.message
    throw new AdminClientError(`cannot reach the admin API at ${baseUrl} (${code}): is the gateway running with this admin.listen?`)
  }
  const text = await res.text()
  let body: unknown
  try {
    body = text === '' ? null : JSON.parse(text)
  } catch {
    throw new AdminClientError(
      `the admin API at ${baseUrl} answered ${res.status} with a body that is not JSON: is admin.listen another server?`,
      res.status,
    )
  }
  if (res.ok) return body
  const message = (body as { error?: unknown } | null)?.error
  if (res.status === 401) {
    throw new AdminClientError(`the admin API refused the token (401): admin.token in this config differs from the running gateway's`, 401)
  }
  throw new AdminClientError(`${res.status}: ${typeof message === 'string' ? message : text.trim()}`, res.status)
}

/** The local user, for the audit trail's `admin:<name>` (a hint, not an identity). */
function operatorName(): string {
  try {
    return userInfo()
      .username.replace(/[^\x20-\x7e]/g, '')
      .slice(0, 64)
  } catch {
    return ''
  }
}
