import { checkUrl } from './auth'
import { type Reader, join } from './reader'
import { readBlock, readKey } from './read-node'
import { HEALTH_CHECK } from './spec'
import type { HealthCheckConfig } from './types'

/**
 * The `upstream_health_check:` block: how the upstream is probed (upstream/probe.ts), or null with
 * `enabled: false`. Every key is read either way, so a mistake in a switched-off block is still
 * reported. Without `url`, the upstream URL itself is probed. Written for one block per upstream
 * (the reader takes its path), so several servers can each have one.
 */
export function readHealthCheck(r: Reader, value: unknown, path: string): HealthCheckConfig | null {
  const o = readBlock(r, HEALTH_CHECK, value, path)
  const enabled = readKey(r, HEALTH_CHECK, o, 'enabled', path)
  const own = readKey(r, HEALTH_CHECK, o, 'url', path) as string | null
  if (own !== null) {
    const parsed = checkUrl(r, own, join(path, 'url'), ['http:', 'https:'])
    // The URL is shown in /readyz and in logs, which need no token: credentials have no place in it.
    if (parsed && (parsed.username || parsed.password || parsed.hash)) {
      r.note(join(path, 'url'), 'must not have credentials or a fragment (the URL is shown in /readyz and in logs)')
    }
  }
  const config: HealthCheckConfig = {
    url: own,
    method: readKey(r, HEALTH_CHECK, o, 'method', path),
    intervalSeconds: readKey(r, HEALTH_CHECK, o, 'interval_seconds', path),
    timeoutSeconds: readKey(r, HEALTH_CHECK, o, 'timeout_seconds', path),
    affectsReadiness: readKey(r, HEALTH_CHECK, o, 'affects_readiness', path),
  }
  return enabled ? config : null
}
