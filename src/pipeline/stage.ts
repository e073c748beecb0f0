import type { Decision, Exchange, JsonRpcId } from './exchange'

export const CONTINUE = Symbol('continue')

/** JSON-RPC 2.0 §5.1 codes for bodies that are not valid JSON-RPC (Refusal.rpcCode); every other local answer uses its status. */
export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600

/** An expected "no": the gateway answers the request itself instead of forwarding it. */
export interface Refusal {
  /** 401, 403, 413, 429…: the HTTP status, also used as the JSON-RPC error code. */
  readonly status: number
  readonly decision: Decision
  /** For operators, in the audit entry; never sent to the caller. */
  readonly reason: string
  /** JSON-RPC error code when it is not the status (-32700, -32600 for bodies that are not JSON-RPC). */
  readonly rpcCode?: number
  /** Short, generic, safe to show the caller. */
  readonly message: string
  /** What a client can act on (retry_after_seconds); never another caller's state. */
  readonly data?: Readonly<Record<string, unknown>>
  readonly headers?: Readonly<Record<string, string>>
  /** The id to echo when the body could not be parsed into calls but its id was readable. */
  readonly id?: JsonRpcId
  /**
   * Status and headers only, no JSON-RPC error body: a local answer that is not an error (the 204 to
   * a CORS preflight, which a browser requires to be a 2xx). `message` is then unused.
   */
  readonly noBody?: boolean
}

export type Verdict = typeof CONTINUE | Refusal

/**
 * One step of the request path. A stage is built once from its slice of config; `run` either lets the
 * request go on (CONTINUE) or answers it (a Refusal). A stage never writes to the response itself and
 * never calls the next stage: `runStages` does. It may record what it learnt on the Exchange. A stage
 * throws only for failures (a WardlineError), never for refusals.
 */
export interface Stage {
  readonly name: string
  run(ex: Exchange): Verdict | Promise<Verdict>
}

export async function runStages(stages: readonly Stage[], ex: Exchange): Promise<Refusal | null> {
  for (const stage of stages) {
    const verdict = await stage.run(ex)
    if (verdict !== CONTINUE) return verdict
  }
  return null
}
