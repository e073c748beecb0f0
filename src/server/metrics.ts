import { FeatureMetrics } from '../metrics-registry'

/** The gateway's own metric: what /readyz would answer, evaluated when /metrics is scraped. */
export class ServerMetrics extends FeatureMetrics {
  /** /readyz's verdict, asked for at scrape time (server/routes.ts); null until the routes exist. */
  private readiness: (() => Promise<boolean>) | null = null

  constructor(...args: ConstructorParameters<typeof FeatureMetrics>) {
    super(...args)
    const readiness = (): Promise<boolean> | null => this.readiness?.() ?? null
    this.gauge(
      'wardline_ready',
      'What /readyz would answer now: 1 ready (200), 0 not ready or shutting down (503). Evaluated through the same shared checks as /readyz, never an extra database ping',
      [],
      {
        async collect() {
          const ready = readiness()
          this.set(ready === null ? 0 : (await ready) ? 1 : 0)
        },
      },
    )
  }

  /** Where wardline_ready comes from (server/routes.ts: the shared /readyz checks). */
  observeReadiness(ready: () => Promise<boolean>): void {
    this.readiness = ready
  }
}
