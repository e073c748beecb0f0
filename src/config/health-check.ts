import { checkUrl } from './auth'
import type { Reader } from './reader'
import type { HealthCheckConfig, HealthCheckMethod } from './types'

const KEYS = ['enabled', 'url', 'method', 'interval_seconds', 'timeout_seconds', 'affects_readiness']

/**
 * The `upstream_health_check:` block: how the upstream is probed (upstream/probe.ts), or null with
 * `enabled: false`. Every key is read either way, so a mistake in a switched-off block is still
 * reported. Without `url`, the upstream URL itself is probed. Written for one block per upstream
 * (the reader takes its path), so several servers can each have one.
 */
export function readHealthCheck(r: Reader, value: unknown, path: string): HealthCheckConfig | null {
  const o = r.object(value, path, KEYS)
  const enabled = r.bool(o.enabled, `${path}.enabled`, true)
  const own = r.optionalString(o.url, `${path}.url`)
  if (own !== null) {
    const parsed = checkUrl(r, own, `${path}.url`, ['http:', 'https:'])
    // The URL is shown in /readyz and in logs, which need no token: credentials have no place in it.
    if (parsed && (parsed.username || parsed.password || parsed.hash)) {
      r.note(`${path}.url`, 'must not have credentials or a fragment (the URL is shown in /readyz and in logs)')
    }
  }
  const config: HealthCheckConfig = {
    url: own,
    method: r.oneOf<HealthCheckMethod>(o.method, `${path}.method`, ['GET', 'HEAD', 'OPTIONS'], 'GET'),
    intervalSeconds: r.number(o.interval_seconds, `${path}.interval_seconds`, 10, 0, 3600, true),
    // 2 s: an MCP server answers an unsessioned GET at once (400, 405 or 406); a slower head is a sick server.
    timeoutSeconds: r.number(o.timeout_seconds, `${path}.timeout_seconds`, 2, 0, 60, true),
    affectsReadiness: r.bool(o.affects_readiness, `${path}.affects_readiness`, true),
  }
  return enabled ? config : null
}
