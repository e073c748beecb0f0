import { rmSync } from 'node:fs'
import type { ResolvedServer } from './postgres'

/** jest globalTeardown: stops the throwaway server when globalSetup started one. */
export default async function globalTeardown(): Promise<void> {
  const server = (globalThis as { __wardlinePostgres?: ResolvedServer }).__wardlinePostgres
  await server?.embedded?.close()
  const scratch = process.env.WARDLINE_TEST_TMP
  if (scratch) rmSync(scratch, { recursive: true, force: true })
}
