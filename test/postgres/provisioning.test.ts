import { freshDatabase, reachable, resolveServer, ThrowawayPostgres, type TestDatabase, withClient } from '../helpers/postgres'

describe('test Postgres provisioning', () => {
  let a: TestDatabase
  let b: TestDatabase

  beforeAll(async () => {
    a = await freshDatabase()
    b = await freshDatabase()
  })
  afterAll(async () => {
    await a.drop()
    await b.drop()
  })

  test('each call gets its own empty database, so test files never see each other', async () => {
    expect(a.name).not.toBe(b.name)
    await withClient(a.url, (c) => c.query('CREATE TABLE only_in_a (x int)'))
    const tables = await withClient(b.url, (c) =>
      c.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 'only_in_a'"),
    )
    expect(tables.rows[0].n).toBe(0)
  })

  test('a dropped database is gone even while a session is still connected to it', async () => {
    const extra = await freshDatabase()
    const { Client } = await import('pg')
    const held = new Client({ connectionString: extra.url })
    held.on('error', () => undefined)
    await held.connect()
    await extra.drop()
    const left = await withClient(extra.adminUrl, (c) =>
      c.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_database WHERE datname = $1', [extra.name]),
    )
    expect(left.rows[0].n).toBe(0)
    await held.end().catch(() => undefined)
  })

  test('a throwaway embedded server starts, stops and comes back on the same port with its data', async () => {
    const server = await ThrowawayPostgres.launch()
    try {
      await withClient(server.url, (c) => c.query('CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)'))
      await server.stop()
      expect(await reachable(server.url, 500)).toBe(false)
      await server.start()
      const rows = await withClient(server.url, (c) => c.query('SELECT x FROM kept'))
      expect(rows.rows).toEqual([{ x: 7 }])
    } finally {
      await server.close()
    }
    expect(await reachable(server.url, 500)).toBe(false)
  })

  test('with no URL given and nothing listening on the local port, a throwaway embedded server is started', async () => {
    const resolved = await resolveServer({ WARDLINE_TEST_LOCAL_POSTGRES_URL: 'postgres://postgres@127.0.0.1:1/postgres' })
    try {
      expect(resolved.source).toBe('embedded')
      const version = await withClient(resolved.adminUrl, (c) => c.query<{ server_version: string }>('SHOW server_version'))
      expect(version.rows[0].server_version).toMatch(/^17\./)
    } finally {
      await resolved.embedded?.close()
    }
  })

  test('WARDLINE_TEST_DATABASE_URL wins when set', async () => {
    const resolved = await resolveServer({ WARDLINE_TEST_DATABASE_URL: 'postgres://someone@db.example:5432/x' })
    expect(resolved).toMatchObject({ source: 'env', adminUrl: 'postgres://someone@db.example:5432/x', embedded: null })
  })
})
