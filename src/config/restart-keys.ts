import type { Config } from './types'

/** Every YAML key a reload cannot apply, with where its value lives in a Config. */
const RESTART_KEYS: ReadonlyArray<readonly [string, (c: Config) => unknown]> = [
  ['listen', (c) => c.listen],
  ['upstream', (c) => c.upstream.url],
  ['upstream_timeout_seconds', (c) => c.upstream.timeoutSeconds],
  ['upstream_connections', (c) => c.upstream.connections],
  // The probe's timer and its readiness check are made once, at startup.
  ['upstream_health_check', (c) => c.upstream.healthCheck],
  ['max_body_bytes', (c) => c.limits.maxBodyBytes],
  ['request_timeout_seconds', (c) => c.limits.requestTimeoutSeconds],
  ['max_json_depth', (c) => c.limits.maxJsonDepth],
  ['max_batch_messages', (c) => c.limits.maxBatchMessages],
  ['max_concurrent_per_identity', (c) => c.limits.maxConcurrentPerIdentity],
  ['session_idle_seconds', (c) => c.limits.sessionIdleSeconds],
  ['max_sessions', (c) => c.limits.maxSessions],
  ['max_sessions_per_identity', (c) => c.limits.maxSessionsPerIdentity],
  ['allowed_origins', (c) => c.http.allowedOrigins],
  ['allowed_hosts', (c) => c.http.allowedHosts],
  ['trusted_proxies', (c) => c.http.trustedProxies],
  ['shutdown_grace_seconds', (c) => c.shutdownGraceSeconds],
  ['shutdown_delay_seconds', (c) => c.shutdownDelaySeconds],
  ['log_level', (c) => c.logLevel],
  ['log_format', (c) => c.logFormat],
  ['features', (c) => c.features],
  ['audit', (c) => c.audit],
  ['auth', (c) => c.auth],
  ['postgres', (c) => c.postgres],
  // The listener is bound at startup; the token is compared as a digest made then.
  ['admin', (c) => c.admin],
  // The paths only: SIGHUP re-reads the files they name (a renewed certificate) without a restart.
  ['tls', (c) => c.tls],
  ['metrics', (c) => c.metrics],
]

/**
 * The YAML keys whose values differ between two configs but take effect only after a restart (they
 * hold sockets, keys, files or pools). `budget` and `policy` are what a reload applies.
 */
export function keysNeedingRestart(current: Config, next: Config): string[] {
  return RESTART_KEYS.filter(([, read]) => JSON.stringify(read(current)) !== JSON.stringify(read(next))).map(([key]) => key)
}
