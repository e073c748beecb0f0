import { Client, type Dispatcher } from 'undici'
import type { HealthCheckConfig } from '../config/types'
import { describeError } from '../errors'
import type { Logger } from '../log'
import type { ReadinessCheck } from '../readiness'

/** What one probe found. */
export interface ProbeResult {
  readonly up: boolean
  /** The status of the answer's head, or 0 when none came. */
  readonly status: number
  /** Why the upstream counts as down, for people ("connection refused", "timeout after 2 s", "HTTP 502"); null when up. */
  readonly cause: string | null
  /** From the start of the probe to the answer's head (or the failure). */
  readonly durationSeconds: number
  /** When it ended (Unix ms). */
  readonly at: number
}

/**
 * Sent with every probe. `Accept: application/json` without text/event-stream: a Streamable HTTP
 * server answers such a GET 406 at once (the official TypeScript SDK does, before anything else)
 * instead of opening its standalone SSE stream; a server that streams anyway is cut once the head is in
 * (probeOnce). An `Mcp-Session-Id` no server issued: servers that make a session for any request
 * without one (the Python SDK's stateful session manager, for every method) answer an unknown one
 * 404 or 400 instead (MCP 2025-06-18, Streamable HTTP, Session Management), so a probe every 10 s
 * never piles up sessions on the upstream.
 */
export const PROBE_HEADERS: readonly string[] = [
  'accept',
  'application/json',
  'user-agent',
  'wardline-health-check',
  'mcp-session-id',
  'wardline-health-check-not-a-session',
]

/**
 * One probe: a connection of its own, one request, the answer's status line and headers, then the
 * connection is destroyed without reading a byte of the body. So an endless SSE answer cannot hold the
 * probe, and nothing is left open between probes (a kept-alive connection would say nothing of whether
 * the upstream still accepts new ones). Down: no connection, no head within `timeout_seconds`, or a 5xx
 * (the server, or a proxy in front of it, says it cannot serve). Any other status is up: an MCP server
 * answers a request without a session 400, 404, 405 or 406, and that answer proves it serves.
 * Never rejects. `headers`: what the operator configured for this upstream ([name, value, …]), never
 * anything of a caller's.
 */
export function probeOnce(
  target: URL,
  config: HealthCheckConfig,
  headers: readonly string[] = [],
  signal: AbortSignal | null = null,
): Promise<ProbeResult> {
  const timeoutMs = config.timeoutSeconds * 1000
  const started = performance.now()
  const client = new Client(target.origin, { connectTimeout: timeoutMs, headersTimeout: timeoutMs, bodyTimeout: 0, pipelining: 1 })
  return new Promise((resolve) => {
    let settled = false
    const settle = (status: number, cause: string | null): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      signal?.removeEventListener('abort', stopped)
      // Destroys the socket whatever the answer was doing: the body is never read.
      client.destroy().catch(() => undefined)
      resolve({ up: cause === null, status, cause, durationSeconds: (performance.now() - started) / 1000, at: Date.now() })
    }
    // One bound for connecting and the head together (undici's two timeouts would allow twice as long).
    const timer = setTimeout(() => settle(0, `timeout after ${seconds(timeoutMs)}`), timeoutMs)
    timer.unref()
    // Shutdown does not wait out a probe of a hung upstream. Removed when settled: the signal lives as
    // long as the probe's owner, and a listener per probe would pile up.
    const stopped = (): void => settle(0, 'stopped')
    signal?.addEventListener('abort', stopped, { once: true })
    // Every method of undici's handler interface: it tells that interface from its older one by their presence.
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart() {},
      onResponseStart(controller, statusCode) {
        if (statusCode < 200) return // 1xx informational: the final head follows
        settle(statusCode, statusCode >= 500 ? `HTTP ${statusCode}` : null)
        controller.abort(new Error('health probe: head read, body not wanted'))
      },
      onResponseData() {},
      onResponseEnd() {},
      onResponseError(_controller, err) {
        settle(0, probeFailure(err, timeoutMs))
      },
    }
    try {
      client.dispatch(
        { origin: target.origin, path: target.pathname + target.search, method: config.method, headers: [...PROBE_HEADERS, ...headers] },
        handler,
      )
    } catch (err) {
      settle(0, probeFailure(err, timeoutMs))
    }
  })
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`
}

/** TLS failures name themselves in their code (node's ERR_TLS_*, OpenSSL's certificate codes). */
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|UNABLE_TO_|HOSTNAME_MISMATCH)/

/** A failure as an operator reads it in /readyz and the log. */
function probeFailure(err: unknown, timeoutMs: number): string {
  const code = (err as { code?: unknown } | null)?.code
  switch (code) {
    case 'ECONNREFUSED':
      return 'connection refused'
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'UND_ERR_HEADERS_TIMEOUT':
      return `timeout after ${seconds(timeoutMs)}`
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return 'host name not found (DNS)'
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return 'host unreachable'
    case 'ECONNRESET':
    case 'UND_ERR_SOCKET':
    case 'UND_ERR_CLOSED':
      return 'connection closed before an answer'
  }
  if (typeof code === 'string' && TLS_CODE.test(code)) return `TLS: ${describeError(err)}`
  if ((err as Error | null)?.name === 'HTTPParserError' || (typeof code === 'string' && code.startsWith('HPE_'))) {
    return 'the answer is not HTTP'
  }
  return describeError(err)
}

/** Hears every probe's result (metrics). Must not throw. */
export type ProbeListener = (result: ProbeResult) => void

/**
 * The health of one upstream, kept up to date by a probe on a timer: one at start (awaited, so the first
 * /readyz already knows), then one every `interval_seconds`, never two at once. /readyz and the metrics
 * read the last result; nothing they do sends a probe, so a flood of /readyz costs the upstream nothing.
 * The log hears the start and each change (down, back), not every probe. One per upstream: several
 * servers each get their own.
 */
export class UpstreamProbe {
  private latest: ProbeResult | null = null
  /** When the current state (up or down) began (Unix ms). */
  private since = 0
  private timer: NodeJS.Timeout | null = null
  private running: Promise<void> | null = null
  private closed = false
  /** Aborts the probe in flight at close. */
  private readonly stop = new AbortController()
  /** What is probed: upstream_health_check.url, else the upstream URL. */
  private readonly target: URL
  /** Where the upstream is, as logs and /readyz show it: no query (it may carry a key). */
  private readonly shownUrl: string

  constructor(
    private readonly config: HealthCheckConfig,
    upstreamUrl: string,
    private readonly log: Logger,
    private readonly listener: ProbeListener = () => undefined,
    /** The operator's headers for this upstream ([name, value, …]); sent with each probe. */
    private readonly headers: readonly string[] = [],
  ) {
    this.target = new URL(config.url ?? upstreamUrl)
    this.shownUrl = this.target.origin + this.target.pathname
  }

  /** Runs the first probe, logs what it found, and starts the timer. */
  async start(): Promise<void> {
    await this.probe()
    const r = this.latest
    if (r === null || this.closed) return
    const probe = `${this.config.method} ${this.shownUrl}`
    if (r.up) {
      this.log.info('upstream health check passed at startup', {
        probe,
        status: r.status,
        latency_ms: Math.round(r.durationSeconds * 1000),
        interval_seconds: this.config.intervalSeconds,
      })
    } else {
      this.log.warn(
        `upstream health check failed at startup (${r.cause}): calls get 502/504 until it answers${this.config.affectsReadiness ? ', and /readyz answers 503' : ''}; probing every ${this.config.intervalSeconds} s`,
        { probe, cause: r.cause },
      )
    }
    this.schedule(r)
  }

  /** For /readyz: reads the last result (no I/O, so it is asked on every /readyz, never shared). */
  readiness(name = 'upstream'): ReadinessCheck {
    return {
      name,
      required: this.config.affectsReadiness,
      instant: true,
      check: () => Promise.resolve(this.report()),
    }
  }

  /** Stops the timer and the probe in flight (its connection is destroyed), then resolves. */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.stop.abort()
    await this.running
  }

  private report(): { ok: boolean; detail: Record<string, unknown> } {
    const r = this.latest
    const common = {
      url: this.shownUrl,
      method: this.config.method,
      ...(this.config.affectsReadiness ? {} : { affects_readiness: false }),
    }
    if (r === null) return { ok: false, detail: { ...common, cause: 'not probed yet' } }
    return {
      ok: r.up,
      detail: {
        ...common,
        ...(r.status > 0 ? { status: r.status } : {}),
        ...(r.cause === null ? {} : { cause: r.cause }),
        latency_ms: Math.round(r.durationSeconds * 1000),
        last_checked: new Date(r.at).toISOString(),
        since: new Date(this.since).toISOString(),
      },
    }
  }

  private probe(): Promise<void> {
    const run = probeOnce(this.target, this.config, this.headers, this.stop.signal).then((r) => {
      // A probe cut by close() says nothing about the upstream.
      if (!this.closed) this.record(r)
    })
    this.running = run
    return run
  }

  private record(r: ProbeResult): void {
    const before = this.latest
    const changed = before === null || before.up !== r.up
    const downSince = this.since
    this.latest = r
    if (changed) this.since = r.at
    // The gauges: one that throws must not end the probing (the next probe is scheduled after this).
    try {
      this.listener(r)
    } catch (err) {
      this.log.error('upstream probe gauges not updated', { error: describeError(err) })
    }
    if (before === null || !changed) return
    const probe = `${this.config.method} ${this.shownUrl}`
    if (r.up) {
      this.log.info('upstream health check passes again: the upstream is back', {
        probe,
        status: r.status,
        down_seconds: Math.round((r.at - downSince) / 1000),
      })
    } else {
      this.log.warn(`upstream health check failed (${r.cause}): the upstream is down; calls get 502/504 until it answers`, {
        probe,
        cause: r.cause,
      })
    }
  }

  /** The next probe, `interval_seconds` after the start of the last one (at once if that took longer). */
  private schedule(last: ProbeResult): void {
    if (this.closed) return
    const delayMs = Math.max(0, this.config.intervalSeconds * 1000 - last.durationSeconds * 1000)
    this.timer = setTimeout(() => {
      this.timer = null
      void this.probe().then(() => {
        if (this.latest !== null) this.schedule(this.latest)
      })
    }, delayMs)
    // The probe never keeps the process alive on its own: shutdown closes it, and a CLI run ends without waiting.
    this.timer.unref()
  }
}
