import type { ResolvedServer } from './postgres'

/** jest globalTeardown: stops the throwaway server when globalSetup started one. */
export default async function globalTeardown(): Promise<void> {
  const server = (globalThis as { __wardlinePostgres?: ResolvedServer }).__wardlinePostgres
  await server?.embedded?.close()
}
