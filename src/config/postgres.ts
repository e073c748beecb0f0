import type { PostgresConfig } from './types'
import type { Reader } from './reader'

export function readPostgres(r: Reader, value: unknown): PostgresConfig | null {
  if (value === undefined || value === null) return null
  const o = r.object(value, 'postgres', ['dsn', 'max_connections'])
  const dsn = r.string(o.dsn, 'postgres.dsn', '', { nonEmpty: true })
  if (o.dsn === undefined || o.dsn === null) r.note('postgres.dsn', 'is required')
  else if (dsn && !/^postgres(ql)?:\/\//.test(dsn))
    r.note('postgres.dsn', 'must be a postgres:// or postgresql:// URL (its value is not shown)')
  return { dsn, maxConnections: r.int(o.max_connections, 'postgres.max_connections', 10, 1, 1000) }
}
