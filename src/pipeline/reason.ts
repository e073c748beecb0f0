import type { ErrorCode } from '../errors'

/**
 * Why a request got the decision it got, as a stable word an operator can filter on
 * (`wardline audit --reason-code`) and a dashboard can count, where `reason` is free text that may
 * change wording between releases. The table with each code's decision and status is in
 * docs/gateway.md ("Reason codes"). An ordinary allow or passthrough has none: its entry carries no
 * `reason_code`. Never rename one: stored trails and operators' queries hold them.
 */
export const REASON_CODES = [
  'http.host',
  'http.origin',
  'http.header',
  'http.preflight',
  'http.method',
  'http.path',
  'route.unknown_server',
  'auth.missing_token',
  'auth.invalid_token',
  'auth.keys_unavailable',
  'auth.revoked',
  'session.not_owner',
  'concurrency.limit',
  'body.too_large',
  'body.timeout',
  'body.unreadable',
  'body.encoding',
  'client.closed',
  'jsonrpc.invalid',
  'jsonrpc.id_reused',
  'mcp.header_mismatch',
  'audit.backpressure',
  'policy.denied',
  'budget.exceeded',
  'budget.repeat',
  'budget.store_failed',
  'upstream.unreachable',
  'upstream.timeout',
  'upstream.failed',
  'shutdown.cut',
  'admin.invalid_request',
  'admin.store_failed',
  'internal',
] as const
export type ReasonCode = (typeof REASON_CODES)[number]

export function isReasonCode(value: unknown): value is ReasonCode {
  return (REASON_CODES as readonly unknown[]).includes(value)
}

/** The reason code of a failure thrown as a WardlineError (its code says what failed). */
const FAILURE_CODES: Readonly<Record<ErrorCode, ReasonCode>> = {
  WL_CONFIG_INVALID: 'internal',
  WL_BUDGET_STORE_FAILED: 'budget.store_failed',
  WL_UPSTREAM_UNREACHABLE: 'upstream.unreachable',
  WL_UPSTREAM_TIMEOUT: 'upstream.timeout',
  WL_UPSTREAM_FAILED: 'upstream.failed',
  WL_AUTH_KEYS_UNAVAILABLE: 'auth.keys_unavailable',
  WL_POSTGRES_UNAVAILABLE: 'internal',
  WL_AUDIT_BACKPRESSURE: 'audit.backpressure',
  WL_LISTEN_FAILED: 'internal',
  WL_INTERNAL: 'internal',
}

export function failureCode(code: ErrorCode): ReasonCode {
  return FAILURE_CODES[code]
}

/**
 * Kinds of note, as bit flags: what a stage noted is asked by its kind (`hasNote`), never by
 * searching the text, which is for operators and may be reworded.
 */
export const NOTE = {
  budgetFailOpen: 1,
  budgetDegraded: 2,
  budgetRefunded: 4,
  listFiltered: 8,
  completionFiltered: 16,
  shutdownCut: 32,
} as const
export type NoteKind = (typeof NOTE)[keyof typeof NOTE]

/** What carries a reason: an Exchange (the request's) or an RpcCall (one element's). */
export interface Reasoned {
  /** For operators (the audit `reason`): the cause first when there is one, then the notes in the order they came. */
  reason: string
  reasonCode: ReasonCode | null
  /** The NOTE kinds added so far, or-ed together. */
  noteKinds: number
}

/** Two reason texts as one, in order, either possibly empty: the one place reasons are joined. */
export function joinReasons(first: string, then: string): string {
  if (then === '') return first
  return first === '' ? then : `${first}; ${then}`
}

/**
 * The one way a note is added: after everything already said, so no earlier note (a budget check
 * that failed open, a refund, what a list hid) is ever lost to a later one.
 */
export function addNote(on: Reasoned, kind: NoteKind, text: string): void {
  on.reason = joinReasons(on.reason, text)
  on.noteKinds |= kind
}

export function hasNote(on: Reasoned, kind: NoteKind): boolean {
  return (on.noteKinds & kind) !== 0
}

/**
 * Records why the request got its decision: a refusal, a failure, the client leaving. The code is
 * the latest cause's (a request that was refused and then failed in its finish phase is `internal`);
 * the text goes first when `lead` (a failure's WL_ code leads its reason), else after what was
 * already said; nothing said before is dropped.
 */
export function setCause(on: Reasoned, code: ReasonCode, text: string, lead = false): void {
  on.reasonCode = code
  on.reason = lead ? joinReasons(text, on.reason) : joinReasons(on.reason, text)
}
