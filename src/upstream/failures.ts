import { type WardlineError, describeError } from '../errors'
import { type Logger, RateLimitedLog } from '../log'

/**
 * What went wrong with the MCP server, as wardline_upstream_errors_total{kind} says it. A fixed set,
 * so the label never takes a value a caller or an upstream could choose.
 */
export const UPSTREAM_ERROR_KINDS = ['unreachable', 'timeout', 'reset', 'bad_response', 'other'] as const
export type UpstreamErrorKind = (typeof UPSTREAM_ERROR_KINDS)[number]

/** Told once per forwarded request the upstream failed (Upstream's constructor); must not throw. */
export type UpstreamFailureListener = (failure: WardlineError) => void

/**
 * Codes meaning the connection went away under an answer: the peer reset or closed it (undici's
 * SocketError is "other side closed"), or a write hit a closed socket.
 */
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED'])

/**
 * The kind of a failure forward.ts decided. WL_UPSTREAM_UNREACHABLE and _TIMEOUT say it already;
 * WL_UPSTREAM_FAILED is split by its cause: a reset, or an answer that broke HTTP (undici's
 * HTTPParserError, a body shorter than its Content-Length) or that a stage could not read (no cause: the gateway
 * itself refused it).
 */
export function upstreamErrorKind(failure: WardlineError): UpstreamErrorKind {
  if (failure.code === 'WL_UPSTREAM_UNREACHABLE') return 'unreachable'
  if (failure.code === 'WL_UPSTREAM_TIMEOUT') return 'timeout'
  if (failure.code !== 'WL_UPSTREAM_FAILED') return 'other'
  if (failure.cause === undefined) return 'bad_response'
  const cause: unknown = failure.cause
  if (typeof cause !== 'object' || cause === null) return 'other'
  // undici's HTTPParserError carries its llhttp code only for some errors ("Invalid status code" has none).
  if ((cause as Error).name === 'HTTPParserError') return 'bad_response'
  const code = (cause as { code?: unknown }).code
  if (typeof code !== 'string') return 'other'
  if (RESET_CODES.has(code)) return 'reset'
  if (code.startsWith('HPE_') || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH' || code === 'UND_ERR_INFO') return 'bad_response'
  return 'other'
}

/** The warning logged for each kind (at most once a minute per kind). */
const MESSAGES: Record<UpstreamErrorKind, string> = {
  unreachable: 'upstream unreachable: calls get 502 (WL_UPSTREAM_UNREACHABLE) until it accepts connections',
  timeout: 'upstream sent no response headers within upstream.timeout_seconds: calls get 504 (WL_UPSTREAM_TIMEOUT)',
  reset: 'upstream closed or reset the connection before its answer ended (WL_UPSTREAM_FAILED)',
  bad_response: 'upstream answer could not be relayed (WL_UPSTREAM_FAILED)',
  other: 'upstream request failed (WL_UPSTREAM_FAILED)',
}

/**
 * The listener upstream/open.ts gives the Upstream: each failure counted by kind, and logged at most once a
 * minute per kind with how many were held back. Each failure is audited too (decision `error`), but an
 * operator watching logs should not have to query the trail to learn the MCP server is down, and an
 * outage failing every call must not write a line per call.
 */
export function upstreamFailureReporter(
  count: (kind: UpstreamErrorKind) => void,
  log: Logger,
  upstreamUrl: string,
  intervalMs = 60_000,
  now: () => number = Date.now,
): UpstreamFailureListener {
  const warnings = new RateLimitedLog(log, intervalMs, now)
  // The origin only: nothing of the path or query (the config refuses credentials in it already).
  const upstream = new URL(upstreamUrl).origin
  return (failure) => {
    const kind = upstreamErrorKind(failure)
    count(kind)
    warnings.warn(`upstream-${kind}`, MESSAGES[kind], { code: failure.code, kind, upstream, cause: describeError(failure) })
  }
}
