import type { ServerResponse } from 'node:http'
import type { BudgetStore } from '../../src/budget/store'
import { type RawUpstream, startRawUpstream } from '../e2e/raw-upstream'
import { type BudgetHarness, type Reply, startBudgetHarness } from './budget-harness'

/**
 * What the upstream does with the next request: answer JSON with that status (429 and 503 with
 * Retry-After), answer 202 with no body, answer over SSE (`429-sse`: a 429 head; `200-sse-error`: a 200
 * head carrying a JSON-RPC error coded 429), reset the connection before any header, or hold the
 * request unanswered (`stall`) until the test answers it.
 */
export type Mode = 200 | 202 | 400 | 429 | 500 | 503 | '429-sse' | '200-sse-error' | 'reset' | 'stall'

export interface Held {
  readonly res: ServerResponse
  readonly body: string
}

/** A budgeted gateway in front of an upstream that does what `mode` says when each request arrives. */
export interface Rig {
  readonly h: BudgetHarness
  readonly upstream: RawUpstream
  mode: Mode
  /** Requests the upstream holds unanswered (mode `stall`), oldest first. */
  readonly held: Held[]
}

const open: Array<() => Promise<void>> = []

/** Closes `close` with the rigs, at the next closeRigs (another gateway a test started beside them). */
export function closeWithRigs(close: () => Promise<void>): void {
  open.push(close)
}

/** Closes every rig started since the last call (each test file calls it in afterEach). */
export async function closeRigs(): Promise<void> {
  for (const close of open.splice(0).reverse()) await close()
}

/** A JSON-RPC answer to every message of `requestBody` (a batch gets an array): a result for 2xx, else an error. */
export function answer(res: ServerResponse, status: number, requestBody: string): void {
  let parsed: { id?: unknown } | Array<{ id?: unknown }>
  try {
    parsed = JSON.parse(requestBody) as typeof parsed
  } catch {
    parsed = {}
  }
  const one = (m: { id?: unknown }): unknown =>
    status < 300
      ? { jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'served' }] } }
      : { jsonrpc: '2.0', id: m.id, error: { code: -32000, message: `upstream says ${status}` } }
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (status === 429 || status === 503) headers['retry-after'] = '7'
  res.writeHead(status, headers)
  res.end(JSON.stringify(Array.isArray(parsed) ? parsed.map(one) : one(parsed)))
}

/** `store`: one the test reads or shares; by default the harness makes one. */
export async function startRig(options: {
  budget: Record<string, unknown>
  config?: Record<string, unknown>
  store?: BudgetStore
}): Promise<Rig> {
  const sw: { mode: Mode; readonly held: Held[] } = { mode: 200, held: [] }
  const upstream = await startRawUpstream((req, res, seen) => {
    const mode = sw.mode
    if (mode === 'reset') req.socket.destroy()
    else if (mode === 'stall') sw.held.push({ res, body: seen.body })
    else if (mode === 202) {
      res.writeHead(202)
      res.end()
    } else if (mode === '429-sse' || mode === '200-sse-error') {
      const id = (JSON.parse(seen.body) as { id?: unknown }).id
      res.writeHead(mode === '429-sse' ? 429 : 200, { 'content-type': 'text/event-stream' })
      const msg =
        mode === '429-sse'
          ? { jsonrpc: '2.0', id, error: { code: -32000, message: 'busy' } }
          : { jsonrpc: '2.0', id, error: { code: 429, message: 'rate limited inside the tool' } }
      res.end(`event: message\ndata: ${JSON.stringify(msg)}\n\n`)
    } else answer(res, mode, seen.body)
  })
  const h = await startBudgetHarness({
    budget: options.budget,
    store: options.store,
    config: { upstream: upstream.url, ...options.config },
  })
  open.push(async () => {
    await upstream.close() // first: a request still held then fails at once instead of holding up the shutdown
    await h.close()
  })
  return Object.assign(sw, { h, upstream })
}

/** The `r` (units left) of each item of a response's RateLimit field, by item name. */
export function remaining(reply: Reply | Response): Record<string, number> {
  const out: Record<string, number> = {}
  for (const item of (reply.headers.get('ratelimit') ?? '').split(', ')) {
    const m = /^"([^"]+)";r=(\d+);/.exec(item)
    if (m) out[m[1]] = Number(m[2])
  }
  return out
}
