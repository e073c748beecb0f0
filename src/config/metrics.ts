import { readListenAddress, sharesListener } from './listen-address'
import type { Reader } from './reader'
import type { Config, MetricsConfig } from './types'

/**
 * The `metrics:` block: `listen` (host:port) moves /metrics off the public listener onto one of its
 * own (plain HTTP, no token: keep it on loopback or a private network). Absent: /metrics stays on
 * `listen`, as before the key existed.
 */
export function readMetrics(r: Reader, value: unknown, listen: Config['listen'], admin: Config['admin']): MetricsConfig | null {
  if (value === undefined || value === null) return null
  const o = r.object(value, 'metrics', ['listen'])
  if (o.listen === undefined || o.listen === null) return null
  const address = readListenAddress(r, o.listen, 'metrics.listen', '127.0.0.1:9464')
  if (address === null) return null
  if (sharesListener(address, listen)) {
    r.note('metrics.listen', `must differ from listen (${listen.host}:${listen.port}): it is a listener of its own`)
  } else if (admin !== null && sharesListener(address, admin.listen)) {
    r.note('metrics.listen', `must differ from admin.listen (${admin.listen.host}:${admin.listen.port})`)
  }
  return { listen: address }
}
