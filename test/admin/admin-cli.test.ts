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
  expect(lines[0]).toBe('budgets (this replica, tenant acme):')
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
  expect(r.stdout).toMatch(/^reset 1 bucket \(this replica, tenant acme\):\nKIND\s+NAME\s+TENANT\s+WINDOW\s+LIMIT\s+USED BEFORE\n/)
  expect(r.stdout).toMatch(/\nidentity\s+bob\s+acme\s+60s\s+3\s+3\n/)
  expect(await call('bob')).toBe(200)
})

test('budget show without --tenant says it read tenant default, in the heading and in a note', () => {
  const r = runCli(['budget', 'show', '--config', configFile, '--identity', 'alice'])
  expect(r.code).toBe(0)
  const lines = r.stdout.trimEnd().split('\n')
  expect(lines[0]).toBe('budgets (this replica, tenant default):')
  expect(lines[1]).toBe('note: no --tenant given: read tenant default (tokens without a tenant claim)')
  const json = JSON.parse(runCli(['budget', 'show', '--config', configFile, '--identity', 'alice', '--json']).stdout) as { tenant: string }
  expect(json.tenant).toBe('default')
  expect(runCli(['budget', 'show', '--config', configFile]).stdout.split('\n')[0]).toBe('budgets (this replica):') // no identity, no tenant
})

test('revoke, --list and --remove', async () => {
  expect(await call('carol')).toBe(200)
  const r = runCli(['revoke', '--config', configFile, '--identity', 'carol', '--tenant', 'acme', '--until', '1h', '--reason', 'offboarded'])
  expect(r.stderr).toBe('')
  expect(r.stdout).toMatch(/^revoked carol in tenant acme until \d{4}-\d\d-\d\dT[\d:.]+Z\n$/)
  expect(await call('carol')).toBe(401)
  const list = runCli(['revoke', '--list', '--config', configFile])
  expect(list.code).toBe(0)
  expect(list.stdout).toMatch(
    /^KIND\s+TENANT\s+IDENTITY\s+JTI\s+ISSUED BEFORE\s+UNTIL\s+SINCE\s+REASON\nidentity\s+acme\s+carol\s+-\s+-\s+\S+\s+\S+\s+offboarded\n$/,
  )
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

test('revoke --issued-before and --jti, listed beside identity revocations, and lifted', async () => {
  const made = runCli([
    'revoke',
    '--config',
    configFile,
    '--identity',
    'erin',
    '--tenant',
    'acme',
    '--issued-before',
    '2026-01-01T00:00:00Z',
  ])
  expect(made).toMatchObject({ code: 0, stderr: '' })
  expect(made.stdout).toBe('revoked the tokens of erin in tenant acme issued before 2026-01-01T00:00:00.000Z until lifted\n')
  expect(await call('erin')).toBe(401) // header mode: no iat, refused
  const jti = runCli(['revoke', '--config', configFile, '--jti', 'tok-9', '--until', '1h'])
  expect(jti.stdout).toMatch(/^revoked token jti tok-9 until \d{4}-/)
  const list = runCli(['revoke', '--list', '--config', configFile])
  expect(list.stdout).toMatch(
    /^KIND\s+TENANT\s+IDENTITY\s+JTI\s+ISSUED BEFORE\s+UNTIL\s+SINCE\s+REASON\nissued_before\s+acme\s+erin\s+-\s+2026-01-01T00:00:00\.000Z\s+until lifted\s+\S+\s*\njti\s+-\s+-\s+tok-9\s+-\s+\S+\s+\S+\s*\n$/,
  )
  const json = JSON.parse(runCli(['revoke', '--list', '--json', '--config', configFile]).stdout) as { revocations: Array<{ kind: string }> }
  expect(json.revocations.map((r) => r.kind)).toEqual(['issued_before', 'jti'])
  const liftIb = runCli(['revoke', '--remove', '--config', configFile, '--identity', 'erin', '--tenant', 'acme', '--issued-before'])
  expect(liftIb.stdout).toBe('lifted the issued-before revocation of erin in tenant acme\n')
  expect(runCli(['revoke', '--remove', '--config', configFile, '--jti', 'tok-9']).stdout).toBe('lifted the revocation of token jti tok-9\n')
  expect(await call('erin')).toBe(200)
  expect(runCli(['revoke', '--list', '--config', configFile]).stdout).toBe('no revocations in force\n')
})

test.each([
  [['revoke', '--list'], 'the admin API is off (admin.listen is not set)', 'off'],
  [['budget', 'show'], 'the admin API refused the token (401): admin.token in this config differs from the running gateway', 'wrong'],
  [
    ['budget', 'show'],
    /cannot reach the admin API at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): is the gateway running with this admin\.listen\?/,
    'closed',
  ],
  [['budget', 'reset'], 'budget reset needs --identity, --tenant, --tool or --server (resetting every bucket is not offered)', 'good'],
  [
    ['revoke', '--identity', 'x', '--tenant', 'default', '--until', 'tomorrow'],
    '--until must be a duration (90s, 30m, 1h, 7d) or an ISO 8601 time (2026-12-01T18:00:00Z), not "tomorrow"',
    'good',
  ],
  [
    ['revoke', '--identity', 'x', '--tenant', 'default', '--until', '2020-01-01T00:00:00Z'],
    '400: until (2020-01-01T00:00:00.000Z) is not in the future: the revocation would never apply',
    'good',
  ],
  [
    ['revoke', '--remove', '--identity', 'nobody', '--tenant', 'default'],
    '404: no revocation for identity "nobody" in tenant "default"',
    'good',
  ],
  [['revoke'], '--identity (with --tenant) or --jti is required (or --list)', 'good'],
  [
    ['revoke', '--identity', 'alice'],
    '--tenant is required with --identity (on a single-tenant gateway, and for tokens without a tenant claim, it is --tenant default)',
    'good',
  ],
  [['revoke', '--remove', '--identity', 'alice'], '--tenant is required with --identity', 'good'],
  [['revoke', '--identity', 'alice', '--issued-before', 'now'], '--tenant is required with --identity', 'good'],
  [['revoke', '--jti', 'j', '--tenant', 'acme'], '--jti names one token: leave out --tenant', 'good'],
  [['revoke', '--list', '--jti', 'j'], '--list lists every revocation: leave out --jti', 'good'],
  [['revoke', '--identity', 'a', '--tenant', 't', '--issued-before'], '--issued-before needs a time: an ISO 8601 time or "now"', 'good'],
  [
    ['revoke', '--identity', 'a', '--tenant', 't', '--issued-before', 'yesterday'],
    '--issued-before must be an ISO 8601 time (2026-12-01T18:00:00Z) or "now", not "yesterday"',
    'good',
  ],
  [
    ['revoke', '--identity', 'a', '--tenant', 't', '--issued-before', '2999-01-01T00:00:00Z'],
    '400: issued_before (2999-01-01T00:00:00.000Z) is in the future',
    'good',
  ],
  [['revoke', '--remove', '--identity', 'a', '--tenant', 't', '--issued-before', 'now'], '--remove --issued-before takes no time', 'good'],
  [['revoke', '--remove', '--jti', 'nothing-here'], '404: no revocation for token jti "nothing-here"', 'good'],
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
