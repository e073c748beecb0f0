import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { type Served, freePort, killServed, runCli, startServe } from '../helpers/cli'
import { MCP_HEADERS, as, readJsonl, tempDir, toolCall } from '../helpers/harness'

const TOKEN = 'cli-admin-token-0123456789abcdef0123456789'

let upstream: ExampleServer
let served: Served
let dir: string
let configFile: string
let adminPort: number

function writeConfig(name: string, admin: Record<string, unknown> | null): string {
  const file = join(dir, name)
  writeFileSync(
    file,
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      features: { budget_enforcement: true },
      budget: { requests_per_window: 3, window_seconds: 60 },
      ...(admin === null ? {} : { admin }),
    }),
  )
  return file
}

beforeAll(async () => {
  upstream = await startExampleServer({ mode: 'stateless-json' })
  dir = tempDir()
  adminPort = await freePort()
  // On every interface: the CLI then connects to 127.0.0.1.
  configFile = writeConfig('wardline.yaml', { listen: `0.0.0.0:${adminPort}`, token: TOKEN })
  served = await startServe(configFile)
})
afterAll(async () => {
  await served?.stop()
  killServed()
  await upstream.close()
})

const call = (identity: string): Promise<number> =>
  fetch(`${served.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall('echo', { text: 'hi' })),
  }).then(async (res) => (await res.text(), res.status))

test('budget show prints a table of the buckets, and JSON with --json', async () => {
  expect(await call('alice')).toBe(200)
  expect(await call('alice')).toBe(200)
  const r = runCli(['budget', 'show', '--config', configFile, '--identity', 'alice', '--tenant', 'acme'])
  expect(r.stderr).toBe('')
  expect(r.code).toBe(0)
  const lines = r.stdout.trimEnd().split('\n')
  expect(lines[0]).toBe('budgets (this replica):')
  expect(lines[1]).toMatch(/^KIND\s+NAME\s+TENANT\s+WINDOW\s+LIMIT\s+USED\s+REMAINING\s+RESETS IN\s+RESETS AT$/)
  expect(lines[2]).toMatch(/^identity\s+alice\s+acme\s+60s\s+3\s+2\s+1\s+\d+s\s+\d{4}-\d\d-\d\dT/)
  expect(lines[3]).toBe('note: tenant "acme" has no bucket of its own (it is not under budget.tenants)')

  const json = runCli(['budget', 'show', '--config', configFile, '--identity', 'alice', '--tenant', 'acme', '--json'])
  expect(json.code).toBe(0)
  expect((JSON.parse(json.stdout) as { buckets: unknown }).buckets).toEqual([
    expect.objectContaining({ kind: 'identity', name: 'alice', used: 2, remaining: 1 }),
  ])
})

test('budget reset resets the buckets and the next call is admitted', async () => {
  expect(await call('bob')).toBe(200)
  expect(await call('bob')).toBe(200)
  expect(await call('bob')).toBe(200)
  expect(await call('bob')).toBe(429)
  const r = runCli(['budget', 'reset', '--config', configFile, '--identity', 'bob', '--tenant', 'acme'])
  expect(r.code).toBe(0)
  expect(r.stdout).toMatch(/^reset 1 bucket \(this replica\):\nKIND\s+NAME\s+TENANT\s+WINDOW\s+LIMIT\s+USED BEFORE\n/)
  expect(r.stdout).toMatch(/\nidentity\s+bob\s+acme\s+60s\s+3\s+3\n/)
  expect(await call('bob')).toBe(200)
})

test('revoke, --list and --remove', async () => {
  expect(await call('carol')).toBe(200)
  const r = runCli(['revoke', '--config', configFile, '--identity', 'carol', '--tenant', 'acme', '--until', '1h', '--reason', 'offboarded'])
  expect(r.stderr).toBe('')
  expect(r.stdout).toMatch(/^revoked carol in tenant acme until \d{4}-\d\d-\d\dT[\d:.]+Z\n$/)
  expect(await call('carol')).toBe(401)
  const list = runCli(['revoke', '--list', '--config', configFile])
  expect(list.code).toBe(0)
  expect(list.stdout).toMatch(/^TENANT\s+IDENTITY\s+UNTIL\s+SINCE\s+REASON\nacme\s+carol\s+\S+\s+\S+\s+offboarded\n$/)
  const removed = runCli(['revoke', '--remove', '--config', configFile, '--identity', 'carol', '--tenant', 'acme'])
  expect(removed.stdout).toBe('lifted the revocation of carol in tenant acme\n')
  expect(await call('carol')).toBe(200)
  expect(runCli(['revoke', '--list', '--config', configFile]).stdout).toBe('no revocations in force\n')

  // Each CLI call is in the trail once, with the local user as a hint.
  const entries = readJsonl(join(dir, 'audit.jsonl')).filter((e) => e.method.startsWith('admin/revocations'))
  expect(entries.map((e) => e.method)).toEqual([
    'admin/revocations.create',
    'admin/revocations.list',
    'admin/revocations.remove',
    'admin/revocations.list',
  ])
  for (const e of entries) expect(e.identity).toMatch(/^admin/)
})

test.each([
  [['revoke', '--list'], 'the admin API is off (admin.listen is not set)', 'off'],
  [['budget', 'show'], 'the admin API refused the token (401): admin.token in this config differs from the running gateway', 'wrong'],
  [
    ['budget', 'show'],
    /cannot reach the admin API at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): is the gateway running with this admin\.listen\?/,
    'closed',
  ],
  [['budget', 'reset'], 'budget reset needs --identity, --tenant or --tool (resetting every bucket is not offered)', 'good'],
  [
    ['revoke', '--identity', 'x', '--until', 'tomorrow'],
    '--until must be a duration (90s, 30m, 1h, 7d) or an ISO 8601 time (2026-12-01T18:00:00Z), not "tomorrow"',
    'good',
  ],
  [
    ['revoke', '--identity', 'x', '--until', '2020-01-01T00:00:00Z'],
    '400: until (2020-01-01T00:00:00.000Z) is not in the future: the revocation would never apply',
    'good',
  ],
  [['revoke', '--remove', '--identity', 'nobody'], '404: no revocation for identity "nobody" in tenant "default"', 'good'],
  [['revoke'], '--identity is required (or --list)', 'good'],
])('%j exits 1: %s', async (args, message, which) => {
  const file =
    which === 'off'
      ? writeConfig('off.yaml', null)
      : which === 'wrong'
        ? writeConfig('wrong.yaml', { listen: `127.0.0.1:${adminPort}`, token: 'x'.repeat(40) })
        : which === 'closed'
          ? writeConfig('closed.yaml', { listen: `127.0.0.1:${await freePort()}`, token: TOKEN })
          : configFile
  const r = runCli([...args, '--config', file])
  expect(r.code).toBe(1)
  expect(r.stdout).toBe('')
  const line = r.stderr.trimEnd()
  expect(line.split('\n')).toHaveLength(1)
  if (typeof message === 'string') expect(line).toContain(message)
  else expect(line).toMatch(message)
})
