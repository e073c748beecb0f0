import type { Pool } from 'pg'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { silentLogger } from '../../src/log'
import { migrate } from '../../src/postgres/migrate'
import { type TestDatabase, closeTestDatabase, openTestDatabase } from './postgres'

/** What the shared-revocation tests run on; every field is set once the file's beforeAll has run. */
export interface RevocationDatabase {
  /** A fresh database of this test file's own, migrated, dropped after the file. */
  readonly db: TestDatabase
  /** A pool on it for the test's own queries. */
  readonly pool: Pool
  /** The example MCP server (stateless JSON) the gateways forward to. */
  readonly upstream: ExampleServer
  /** Run after each test, last registered first (gateways, lists and pools the test opened). */
  readonly cleanups: Array<() => Promise<unknown>>
}

/**
 * Registers the jest hooks of a test file about revocations shared through Postgres: the database,
 * its pool and the example server for the whole file; the three revocation tables emptied before each
 * test and the test's cleanups run after it. Call it at the top level of the file.
 */
export function revocationDatabase(poolSize: number): RevocationDatabase {
  const fixture = { cleanups: [] } as unknown as { -readonly [K in keyof RevocationDatabase]: RevocationDatabase[K] }
  beforeAll(async () => {
    Object.assign(fixture, await openTestDatabase(poolSize))
    await migrate(fixture.pool, silentLogger())
    fixture.upstream = await startExampleServer({ mode: 'stateless-json' })
  })
  afterAll(async () => {
    await fixture.upstream.close()
    await closeTestDatabase(fixture)
  })
  beforeEach(async () => {
    await fixture.pool.query('TRUNCATE wardline_revocations, wardline_token_revocations, wardline_issued_before_revocations')
  })
  afterEach(async () => {
    for (const cleanup of fixture.cleanups.splice(0).reverse()) await cleanup().catch(() => undefined)
  })
  return fixture
}
