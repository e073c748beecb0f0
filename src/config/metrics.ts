import { readListenAddress, sharesListener } from './listen-address'
import { type Reader, join } from './reader'
import { readBlock } from './read-node'
import { METRICS } from './spec'
import type { Config, MetricsConfig } from './types'

/**
 * The `metrics:` block: `listen` (host:port) moves /metrics off the public listener onto one of its
 * own (plain HTTP, no token: keep it on loopback or a private network). Absent: /metrics stays on
 * `listen`, as before the key existed.
 */
export function readMetrics(
  r: Reader,
  value: unknown,
  listen: Config['listen'],
  admin: Config['admin'],
  path = 'metrics',
): MetricsConfig | null {
  if (value === undefined || value === null) return null
  const o = readBlock(r, METRICS, value, path)
  if (o.listen === undefined || o.listen === null) return null
  const at = join(path, 'listen')
  const address = readListenAddress(r, o.listen, at, '127.0.0.1:9464')
  if (address === null) return null
  if (sharesListener(address, listen)) {
    r.note(at, `must differ from listen (${listen.host}:${listen.port}): it is a listener of its own`)
  } else if (admin !== null && sharesListener(address, admin.listen)) {
    r.note(at, `must differ from admin.listen (${admin.listen.host}:${admin.listen.port})`)
  }
  return { listen: address }
}
