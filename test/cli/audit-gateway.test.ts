/**
 * The whole loop: a real gateway with Postgres storage and audit.retention_days writes its trail
 * (the table and a JSONL file), and `wardline audit` answers "what did alice do" from either.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { runCli } from '../helpers/cli'
import { MCP_HEADERS, as, type Harness, startHarness, tempDir, toolCall } from '../helpers/harness'
import { type TestDatabase, freshDatabase } from '../helpers/postgres'

let db: TestDatabase
let h: Harness

beforeAll(async () => {
  db = await freshDatabase()
  h = await startHarness({
    mode: 'stateless-json',
    config: {
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn: db.url, max_connections: 4 },
      budget: { requests_per_window: 2, window_seconds: 60 },
      audit: { output: join(tempDir(), 'audit.jsonl'), retention_days: 30 },
    },
  })
})

afterAll(async () => {
  await h?.close()
  await db?.drop()
})

async function call(identity: string, id: number): Promise<number> {
  const r = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' }, id)),
  })
  await r.arrayBuffer()
  return r.status
}

test('alice is throttled on her third call, and wardline audit shows it from the table and from the file alike', async () => {
  expect([await call('alice', 1), await call('alice', 2), await call('alice', 3), await call('bob', 4)]).toEqual([200, 200, 429, 200])
  await h.gateway.audit.flush()
  const config = join(tempDir(), 'wardline.yaml')
  writeFileSync(
    config,
    `upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { postgres_storage: true }\npostgres: { dsn: ${JSON.stringify(db.url)} }\naudit: { output: null, retention_days: 30 }\n`,
  )
  const fromTable = runCli(['audit', '--config', config, '--identity', 'alice', '--since', '1h', '--format', 'jsonl'])
  expect(fromTable.code).toBe(0)
  const entries = fromTable.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as AuditEntry)
  expect(entries.map((e) => [e.identity, e.tool, e.decision, e.status])).toEqual([
    ['alice', 'echo', 'allow', 200],
    ['alice', 'echo', 'allow', 200],
    ['alice', 'echo', 'throttled', 429],
  ])
  const fromFile = runCli(['audit', '--file', h.config.audit.output as string, '--identity', 'alice', '--since', '1h', '--format', 'jsonl'])
  expect(fromFile.stdout).toBe(fromTable.stdout)

  const who = runCli(['audit', '--config', config, '--decision', 'throttled', '--summary', '--by', 'identity', '--format', 'csv'])
  expect(who.stdout).toBe('identity,throttled,total\r\nalice,1,1\r\n')
})

test('the retention worker is wired: its counter is on /metrics, and shutdown stops it cleanly', async () => {
  const metrics = await (await fetch(`${h.url}/metrics`)).text()
  expect(metrics).toMatch(/^wardline_audit_retention_deleted_total 0$/m)
})
