/**
 * The `server` of audit entries, end to end: a gateway in front of two servers writing its trail to a
 * JSONL file and to Postgres at once, and `wardline audit --server` reading each.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Pool } from 'pg'
import type { AuditEntry } from '../../src/audit/entry'
import { runCli } from '../helpers/cli'
import { MCP_HEADERS, as, rpc, tempDir, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { type TestDatabase, freshDatabase, testPool } from '../helpers/postgres'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

let db: TestDatabase
let pool: Pool
let h: ServersHarness

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 1)
  h = await startServersHarness(
    { docs: {}, tickets: {} },
    {
      features: { postgres_storage: true },
      postgres: { dsn: db.url },
      policy: { default: 'allow', rules: [{ identity: '*', tool: 'add', server: 'tickets', effect: 'deny' }] },
    },
  )
})

afterAll(async () => {
  await h.close()
  await pool.end()
  await db.drop()
})

/** One initialize and one tools/call at `path`, in a session (the example servers are stateful). */
async function exercise(path: string, tool: string): Promise<void> {
  const headers = { ...MCP_HEADERS, ...as('alice') }
  const init = await send(
    `${h.url}${path}`,
    'POST',
    headers,
    JSON.stringify(rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } }, 0)),
  )
  const session = { ...headers, 'mcp-session-id': String(init.headers['mcp-session-id']), 'mcp-protocol-version': '2025-06-18' }
  await send(`${h.url}${path}`, 'POST', session, JSON.stringify(toolCall(tool, { a: 1, b: 2 })))
}

function lines(stdout: string): AuditEntry[] {
  return stdout
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as AuditEntry)
}

test('the JSONL line and the Postgres row both carry the server, and wardline audit --server selects by it in each', async () => {
  await exercise('/mcp/docs', 'add')
  await exercise('/mcp/tickets', 'add')
  await send(h.url, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(rpc('ping')), '/mcp/nope')
  const fromFile = await h.audit()
  expect(fromFile.map((e) => [e.method, e.server ?? null, e.decision])).toEqual([
    ['initialize', 'docs', 'passthrough'],
    ['tools/call', 'docs', 'allow'],
    ['initialize', 'tickets', 'passthrough'],
    ['tools/call', 'tickets', 'deny'],
    ['POST', null, 'error'],
  ])
  // The rows as written (the writer flushed with the file's: h.audit() flushes every sink).
  const rows = await pool.query<{ request_id: string; server: string | null }>('SELECT request_id, server FROM audit_entries ORDER BY id')
  expect(rows.rows).toEqual(fromFile.map((e) => ({ request_id: e.request_id, server: e.server ?? null })))

  const dir = tempDir('wardline-servers-audit-')
  const pgConfig = join(dir, 'pg.yaml')
  writeFileSync(
    pgConfig,
    `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(db.url)} }\naudit: { output: null }\n`,
  )
  const fromTable = runCli(['audit', '--config', pgConfig, '--server', 'docs'])
  const fromJsonl = runCli(['audit', '--file', h.auditFile, '--server', 'docs'])
  expect(fromTable.code).toBe(0)
  expect(fromTable.stdout).toBe(fromJsonl.stdout)
  expect(lines(fromTable.stdout).map((e) => [e.method, e.server])).toEqual([
    ['initialize', 'docs'],
    ['tools/call', 'docs'],
  ])
  expect(lines(runCli(['audit', '--config', pgConfig, '--server', '*', '--decision', 'deny']).stdout)).toEqual([
    expect.objectContaining({ tool: 'add', server: 'tickets', reason: 'rule 0' }),
  ])
})
