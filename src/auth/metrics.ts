import { type Gauge } from 'prom-client'
import { FeatureMetrics } from '../metrics-registry'

/** The revocation list's metrics: refusals, failed refreshes, and its size and age read at scrape time. */
export class RevocationMetrics extends FeatureMetrics {
  readonly revocationRefreshFailures = this.counter(
    'wardline_revocation_refresh_failures_total',
    'Refreshes of the shared (Postgres) revocation list that failed; requests were judged on the last list this replica had',
  )
  readonly revokedRequests = this.counter(
    'wardline_revoked_requests_total',
    'Requests refused with 401 because their identity (or its whole tenant) is on the revocation list',
  )
  /** The revocation list's figures (compose.ts), read at scrape time; none until it is handed over. */
  private revocationStats: (() => { readonly active: number; readonly staleSeconds: number }) | null = null
  private readonly revocationsActive: Gauge = this.gauge(
    'wardline_revocations_active',
    'Revocations this replica applies (identities, or whole tenants with identity *) whose until has not passed',
    [],
    {
      collect: (): void => this.revocationsActive.set(this.revocationStats?.().active ?? 0),
    },
  )
  private readonly revocationsStale: Gauge = this.gauge(
    'wardline_revocations_stale_seconds',
    "Age of this replica's copy of the shared revocation list while its refreshes fail (0 while they succeed, and always 0 in memory)",
    [],
    {
      collect: (): void => this.revocationsStale.set(this.revocationStats?.().staleSeconds ?? 0),
    },
  )

  /** Where wardline_revocations_active and wardline_revocations_stale_seconds come from. */
  observeRevocations(stats: () => { readonly active: number; readonly staleSeconds: number }): void {
    this.revocationStats = stats
  }
}
