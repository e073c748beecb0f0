/** A dependency /readyz asks about. `check` must settle quickly (bound it inside). */
export interface ReadinessCheck {
  readonly name: string
  /** Default true: a failing check makes /readyz 503. False: it is reported in the body only. */
  readonly required?: boolean
  /**
   * The check reads a result kept up to date elsewhere and does no I/O (the upstream probe's last
   * result): /readyz asks it every time instead of sharing a run, so its answer is never older than that result.
   */
  readonly instant?: boolean
  check(): Promise<{ ok: boolean; detail?: Record<string, unknown> }>
}

/**
 * A check whose result is shared: while a probe runs, every caller waits for that same probe, and a
 * result is reused until `maxAgeMs` after its probe started. /readyz needs no token, so a probe per
 * request would let anyone open database connections at will (200 concurrent ones gave "too many
 * clients"); shared, a flood costs one probe per `maxAgeMs` at most, and never two at once. Age counts from the probe's start, so
 * no answer describes the dependency as it was more than `maxAgeMs` ago (a probe slower than that is
 * stale on arrival and the next request starts another, still one at a time).
 */
export class SharedReadiness implements ReadinessCheck {
  readonly name: string
  readonly required: boolean | undefined
  private latest: ReturnType<ReadinessCheck['check']> | null = null
  private running = false
  private startedAtMs = 0

  constructor(
    private readonly inner: ReadinessCheck,
    private readonly maxAgeMs = 1000,
    /** Monotonic clock in ms (tests inject one). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.name = inner.name
    this.required = inner.required
  }

  check(): ReturnType<ReadinessCheck['check']> {
    if (this.latest !== null && (this.running || this.now() - this.startedAtMs < this.maxAgeMs)) return this.latest
    this.startedAtMs = this.now()
    this.running = true
    const probe = this.inner.check()
    this.latest = probe
    const settled = (): void => {
      if (this.latest === probe) this.running = false
    }
    // Both ways: a rejected probe is shared like a result (each caller handles it), never unhandled here.
    probe.then(settled, settled)
    return probe
  }
}
