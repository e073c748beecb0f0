import type { Config } from '../config/types'
import type { Closer, Contribution } from '../feature'
import type { Logger } from '../log'
import type { RevocationMetrics } from './metrics'
import type { Stage } from '../pipeline/stage'
import type { PostgresFeature } from '../postgres/open'
import { HeaderAuthenticator } from './header-authenticator'
import { JwtAuthenticator } from './jwt-authenticator'
import { revocationStage } from './revocation-stage'
import { MemoryRevocationList, type RevocationList } from './revocations'
import { PostgresRevocationList } from './revocations-postgres'
import { type Authenticator, authStage } from './stage'

/** Who the caller is, and whether that identity (or its tenant) is revoked: shared by every route. */
export interface AuthFeature extends Contribution {
  readonly revocations: RevocationList
  /** The bearer token (or header) made a principal. */
  readonly auth: Stage
  /** The principal is not on the revocation list. */
  readonly revocation: Stage
}

/** The authenticator auth.mode names, and the revocation list (shared through Postgres when it is on). */
export async function openAuth(
  config: Config,
  postgres: PostgresFeature | null,
  metrics: RevocationMetrics,
  log: Logger,
): Promise<AuthFeature> {
  const authenticator = await openAuthenticator(config, log)
  const closers: Closer[] = [() => authenticator.close?.()]
  const revocations = openRevocations(postgres, metrics, log, closers)
  return {
    revocations,
    closers,
    // /readyz reports where the list is kept and how many entries are in force.
    readyDetails: () => revocations.details(),
    auth: authStage(authenticator, config.auth),
    // On every request, a token answered from the token cache included: a revocation applies at once.
    revocation: revocationStage(revocations, config.auth, () => metrics.revokedRequests.inc()),
  }
}

async function openAuthenticator(config: Config, log: Logger): Promise<Authenticator> {
  if (config.auth.mode === 'header') {
    log.warn('auth.mode is header: identities are taken from X-Wardline-Identity unverified; use only behind a trusted proxy')
    return new HeaderAuthenticator()
  }
  return JwtAuthenticator.open(config.auth.jwt, log)
}

/**
 * The revocation list: with Postgres storage the shared table (loaded by a bring-up step once the
 * migrations have made it, then refreshed every 250 ms until its closer runs; empty and reported stale
 * until the first load), else this process's own list.
 */
function openRevocations(postgres: PostgresFeature | null, metrics: RevocationMetrics, log: Logger, closers: Closer[]): RevocationList {
  if (postgres === null) {
    const list = new MemoryRevocationList()
    metrics.observeRevocations(() => list.stats())
    return list
  }
  const list = new PostgresRevocationList(postgres.pool, { log, onRefreshFailed: () => metrics.revocationRefreshFailures.inc() })
  metrics.observeRevocations(() => list.stats())
  closers.push(() => list.close())
  postgres.bringUp.add({ name: 'revocation list', run: () => list.start() })
  return list
}
