/**
 * What `wardline revoke --list` and `wardline budget show` print when identities, tenants and reasons
 * are hostile: written through the admin API (bidirectional overrides, invisible characters, tag
 * characters: a token can carry them) or straight into Postgres with SQL (line feeds, ESC sequences,
 * C1 controls: anyone with write access to the table). The real CLI against a real `wardline serve`
 * with Postgres storage: nothing a terminal would act on reaches it raw, and no value forges a row.
 * And a revocation's `reason` refuses line breaks and controls at input, in the CLI and the API.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import type { Pool } from 'pg'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { type Served, freePort, killServed, runCli, startServe } from '../helpers/cli'
import { MCP_HEADERS, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { type TestDatabase, freshDatabase, testPool } from '../helpers/postgres'
import { waitFor } from '../helpers/wait'

const TOKEN = 'cli-terminal-admin-token-0123456789abcdef0123'

// Every CLI run is a Node process of its own (about 1-3 s each on a loaded machine).
jest.setTimeout(60_000)

/** Anything a terminal acts on or shows as nothing: controls, separators, bidi and every Default_Ignorable_Code_Point. */
const RAW_UNSAFE = /[\p{Cc}\u2028\u2029\p{Default_Ignorable_Code_Point}]/u

let db: TestDatabase
let pool: Pool
let upstream: ExampleServer
let served: Served
let dir: string
let configFile: string
let adminUrl: string

beforeAll(async () => {
  db = await freshDatabase()
  pool = testPool(db.url, 2)
  upstream = await startExampleServer({ mode: 'stateless-json' })
  dir = tempDir('wardline-cli-terminal-')
  const adminPort = await freePort()
  adminUrl = `http://127.0.0.1:${adminPort}`
  configFile = join(dir, 'wardline.yaml')
  writeFileSync(
    configFile,
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn: db.url },
      budget: { requests_per_window: 5, window_seconds: 60 },
      admin: { listen: `127.0.0.1:${adminPort}`, token: TOKEN },
    }),
  )
  served = await startServe(configFile)
}, 60_000)
afterAll(async () => {
  await served?.stop()
  killServed()
  await upstream?.close()
  await pool?.end()
  await db?.drop()
})

function cli(...args: string[]): { code: number; stdout: string; stderr: string } {
  return runCli([...args, '--config', configFile])
}

describe('revoke --list', () => {
  // Through the admin API: identities a token can carry (no controls), invisible or reordering.
  const viaApi = ['alice\u202egnp.exe', 'alice\u034f', 'alice\u{e0041}\u{e007f}', 'alice\ufe0f', 'alice\u3164', '\u115falice\uffa0']

  beforeAll(async () => {
    for (const identity of viaApi) {
      const r = cli('revoke', '--identity', identity, '--tenant', 'acme', '--reason', 'lookalike')
      expect({ identity, code: r.code, stderr: r.stderr }).toEqual({ identity, code: 0, stderr: '' })
    }
    // With SQL: what no API accepts. A line feed that forges a second row, a screen clear, a C1 CSI.
    await pool.query(
      `INSERT INTO wardline_revocations (tenant, identity, until, reason, created_at) VALUES
        ('acme', $1, NULL, $2, clock_timestamp()), ($3, 'zed', NULL, $4, clock_timestamp())`,
      [
        'mallory\nacme      alice      until lifted  2026-01-01T00:00:00.000Z  forged row',
        'x\u001b[2J\u001b[Hcleared',
        'acme\u009b31m',
        'line one\u2028line two\u0085three\rfour\u001b]0;title\u0007',
      ],
    )
  }, 120_000)

  test('the table shows every hostile value escaped, one row per revocation', () => {
    const r = cli('revoke', '--list')
    expect(r).toMatchObject({ code: 0, stderr: '' })
    const lines = r.stdout.trimEnd().split('\n')
    expect(lines).toHaveLength(1 + viaApi.length + 2) // the heading, then one line per revocation: no forged row
    for (const line of lines) expect(line).not.toMatch(RAW_UNSAFE)
    expect(lines[0]).toMatch(/^KIND\s+TENANT\s+IDENTITY\s+JTI\s+ISSUED BEFORE\s+UNTIL\s+SINCE\s+REASON$/)
    const shown = lines.slice(1).join('\n')
    for (const escaped of [
      'alice\\u202egnp.exe',
      'alice\\u034f',
      'alice\\u{e0041}\\u{e007f}',
      'alice\\ufe0f',
      'alice\\u3164',
      '\\u115falice\\uffa0',
      'mallory\\x0aacme      alice      until lifted',
      'x\\x1b[2J\\x1b[Hcleared',
      'acme\\x9b31m',
      'line one\\u2028line two\\x85three\\x0dfour\\x1b]0;title\\x07',
    ])
      expect(shown).toContain(escaped)
    // No identity reads as plain `alice`.
    expect(lines.slice(1).some((l) => /^\S+\s+alice\s/.test(l))).toBe(false)
  })

  test('--json is the same values to a parser, with nothing raw for a terminal', () => {
    const r = cli('revoke', '--list', '--json')
    expect(r.code).toBe(0)
    expect(r.stdout.trimEnd()).not.toMatch(RAW_UNSAFE)
    const { revocations } = JSON.parse(r.stdout) as { revocations: Array<{ identity: string; tenant: string; reason?: string }> }
    expect(revocations.map((x) => x.identity)).toEqual(
      expect.arrayContaining([...viaApi, 'mallory\nacme      alice      until lifted  2026-01-01T00:00:00.000Z  forged row']),
    )
    expect(revocations.find((x) => x.tenant === 'acme\u009b31m')?.reason).toBe(
      'line one\u2028line two\u0085three\rfour\u001b]0;title\u0007',
    )
  })

  test('the line `revoke` prints names the identity escaped', () => {
    const r = cli('revoke', '--identity', 'bob\u202e\u200b', '--tenant', 'acme')
    expect(r.code).toBe(0)
    expect(r.stdout).toBe('revoked bob\\u202e\\u200b in tenant acme until lifted\n')
  })
})

describe('budget show', () => {
  test("an identity's bucket is shown with its invisible characters escaped", async () => {
    const identity = 'carol\u034f\u{e0041}'
    const res = await fetch(`${served.url}/mcp`, {
      method: 'POST',
      // Node reads header bytes as Latin-1; the gateway takes raw UTF-8 back (header-authenticator.ts).
      headers: { ...MCP_HEADERS, 'x-wardline-identity': Buffer.from(identity).toString('latin1'), 'x-wardline-tenant': 'acme' },
      body: JSON.stringify(toolCall('echo', { text: 'hi' })),
    })
    await res.text()
    expect(res.status).toBe(200)
    const r = cli('budget', 'show', '--identity', identity, '--tenant', 'acme')
    expect(r).toMatchObject({ code: 0, stderr: '' })
    for (const line of r.stdout.trimEnd().split('\n')) expect(line).not.toMatch(RAW_UNSAFE)
    expect(r.stdout).toMatch(/\nidentity\s+carol\\u034f\\u\{e0041\}\s+acme\s+60s\s+5\s+1\s+4\s/)
  })
})

describe('a reason is one line of printable text', () => {
  test.each([
    ['a line feed', 'left\nforged', 'a line break (U+000A) at character 5'],
    ['a C1 CSI', 'ok\u009b31m', 'a control character (U+009B) at character 3'],
    ['NEL', 'a\u0085b', 'a line break (U+0085) at character 2'],
    ['a line separator', 'a\u2028b', 'a line break (U+2028) at character 2'],
    ['ESC', '\u001b[2J', 'a control character (U+001B) at character 1'],
  ])('the CLI refuses %s before calling the API', (_name, reason, where) => {
    const r = cli('revoke', '--identity', 'dave', '--tenant', 'acme', '--reason', reason)
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toBe(`wardline: --reason: reason contains ${where}: a reason is one line of printable text\n`)
  })

  test.each([
    ['a line feed', 'left\nforged', 'a line break (U+000A) at character 5'],
    ['a C1 CSI', 'ok\u009b31m', 'a control character (U+009B) at character 3'],
    ['a carriage return', 'a\rb', 'a line break (U+000D) at character 2'],
    ['a tab', 'a\tb', 'a control character (U+0009) at character 2'],
  ])('the admin API answers %s with 400 and says where', async (_name, reason, where) => {
    const res = await fetch(`${adminUrl}/revocations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ identity: 'erin', tenant: 'acme', reason }),
    })
    expect(res.status).toBe(400)
    expect(await res.json()).toEqual({ error: `reason contains ${where}: a reason is one line of printable text` })
  })

  test('nothing was revoked by the refused requests, and each API call is audited once', async () => {
    const list = cli('revoke', '--list', '--json')
    const { revocations } = JSON.parse(list.stdout) as { revocations: Array<{ identity: string }> }
    expect(revocations.map((x) => x.identity)).not.toContain('dave')
    expect(revocations.map((x) => x.identity)).not.toContain('erin')
    // The serve process writes its audit queue in batches: wait for the four refusals to land.
    const refused = await waitFor(
      () => {
        const found = readJsonl(join(dir, 'audit.jsonl')).filter((e) => e.method === 'admin/revocations.create' && /erin/.test(e.tool))
        return found.length >= 4 && found
      },
      { what: "the admin API's four refusals in the audit file" },
    )
    expect(refused.map((e) => [e.status, e.decision])).toEqual(Array(4).fill([400, expect.any(String)]))
    expect(refused.map((e) => e.reason)).toEqual([
      'reason contains a line break (U+000A) at character 5: a reason is one line of printable text',
      'reason contains a control character (U+009B) at character 3: a reason is one line of printable text',
      'reason contains a line break (U+000D) at character 2: a reason is one line of printable text',
      'reason contains a control character (U+0009) at character 2: a reason is one line of printable text',
    ])
  })
})
