import type { PostgresConfig } from './types'
import { type Reader, join } from './reader'
import { readBlock, readKey } from './read-node'
import { POSTGRES } from './spec'

/** The `postgres:` block at `path`; null when it is absent. */
export function readPostgres(r: Reader, value: unknown, path = 'postgres'): PostgresConfig | null {
  if (value === undefined || value === null) return null
  const o = readBlock(r, POSTGRES, value, path)
  const dsn = readKey(r, POSTGRES, o, 'dsn', path)
  if (o.dsn === undefined || o.dsn === null) r.note(join(path, 'dsn'), 'is required')
  else if (dsn && !/^postgres(ql)?:\/\//.test(dsn))
    r.note(join(path, 'dsn'), 'must be a postgres:// or postgresql:// URL (its value is not shown)')
  return { dsn, maxConnections: readKey(r, POSTGRES, o, 'max_connections', path) }
}
