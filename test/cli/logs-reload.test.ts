/**
 * A reload logs what changed: YAML keys with old → new values, secrets masked, bounded, and which
 * changes wait for a restart. In process (diffConfigs over configs the loader made) and through a real
 * `wardline serve` and SIGHUP.
 */
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { configSecrets, diffConfigs, MAX_LISTED_CHANGES } from '../../src/config/diff'
import { loadConfig, parseConfig } from '../../src/config/load'
import { configOrigin } from '../../src/config/origin'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import type { Config } from '../../src/config/types'
import { hour, hs } from '../auth/forge'
import { ROOT, cliMain, killServed, logRecords, startServe } from '../helpers/cli'
import { tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const JWT_SECRET_A = 'first-jwt-secret-0123456789abcdef-xyz'
const JWT_SECRET_B = 'second-jwt-secret-0123456789abcdef-xyz'

const BASE = {
  listen: '127.0.0.1:0',
  upstream: 'http://127.0.0.1:1',
  auth: { mode: 'jwt', jwt: { secret: JWT_SECRET_A } },
  audit: { output: 'stdout' },
  features: { budget_enforcement: true },
  budget: { limits: [{ requests_per_window: 100, window_seconds: 60 }], tools: { search: { requests_per_window: 5, window_seconds: 60 } } },
  policy: { default: 'allow', rules: [{ identity: 'intern-*', tool: 'deploy', effect: 'deny' }] },
  postgres: { dsn: 'postgres://wardline:old-db-password@db1.internal/wardline' },
}

const load = (tree: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Config => parseConfig(yaml.dump(tree), { env, baseDir: '/srv' })
const diff = (a: Config, b: Config, limit?: number) => diffConfigs(a, b, keysNeedingRestart(a, b), limit)

describe('diffConfigs', () => {
  test('changed leaves are listed by dotted YAML path with old and new values, restart keys marked', () => {
    const before = load(BASE)
    const after = load({
      ...BASE,
      listen: '127.0.0.1:9999',
      budget: {
        ...BASE.budget,
        limits: [
          { requests_per_window: 200, window_seconds: 60 },
          { requests_per_window: 2000, window_seconds: 86400 },
        ],
      },
      policy: { ...BASE.policy, rules: [{ identity: 'intern-*', tool: 'deploy', effect: 'allow' }] },
      tool_refusals: 'result',
    })
    expect(diff(before, after)).toEqual({
      summary: { changed_keys: 5 },
      changes: [
        { key: 'listen', change: 'changed', from: '127.0.0.1:0', to: '127.0.0.1:9999', restart_needed: true },
        { key: 'budget.limits[0].requests_per_window', change: 'changed', from: 100, to: 200, restart_needed: false },
        { key: 'budget.limits[1]', change: 'added', to: { requests_per_window: 2000, window_seconds: 86400 }, restart_needed: false },
        { key: 'policy.rules[0].effect', change: 'changed', from: 'deny', to: 'allow', restart_needed: false },
        { key: 'tool_refusals', change: 'added', to: 'result', restart_needed: false },
      ],
    })
  })

  test('secrets are masked: a jwt secret fully, a DSN down to its password, a whole block added with a secret inside', () => {
    const before = load({ ...BASE, postgres: undefined })
    const mid = load(BASE)
    const after = load({
      ...BASE,
      auth: { mode: 'jwt', jwt: { secret: JWT_SECRET_B } },
      postgres: { dsn: 'postgres://wardline:new-db-password@db2.internal/wardline?sslmode=require&password=x' },
    })
    expect(diff(before, mid).changes).toEqual([
      {
        key: 'postgres',
        change: 'added',
        to: { dsn: 'postgres://wardline:***@db1.internal/wardline' },
        restart_needed: true,
        masked: true,
      },
    ])
    expect(diff(mid, after).changes).toEqual([
      { key: 'auth.jwt.secret', change: 'changed', from: '***', to: '***', restart_needed: true, masked: true },
      {
        key: 'postgres.dsn',
        change: 'changed',
        from: 'postgres://wardline:***@db1.internal/wardline',
        to: 'postgres://wardline:***@db2.internal/wardline?***',
        restart_needed: true,
        masked: true,
      },
    ])
    const text = JSON.stringify([diff(before, mid), diff(mid, after), diff(after, before)])
    for (const secret of [JWT_SECRET_A, JWT_SECRET_B, 'old-db-password', 'new-db-password']) expect(text).not.toContain(secret)
  })

  test('a DSN whose password alone changed says so without showing either side', () => {
    const a = load(BASE)
    const b = load({ ...BASE, postgres: { dsn: 'postgres://wardline:rotated-password@db1.internal/wardline' } })
    expect(diff(a, b).changes).toEqual([
      { key: 'postgres.dsn', change: 'changed', from: '***', to: '***', restart_needed: true, masked: true },
    ])
  })

  test('a URL password under any key is masked, and a long value is cut', () => {
    const a = load({ ...BASE, auth: { mode: 'jwt', jwt: { jwks_url: 'https://idp.example/jwks', algorithms: ['RS256'] } } })
    const b = load({
      ...BASE,
      auth: { mode: 'jwt', jwt: { jwks_url: 'https://svc:idp-basic-password@idp.example/jwks', algorithms: ['RS256'] } },
      allowed_hosts: Array.from({ length: 40 }, (_, i) => `host-${i}.example.com`),
    })
    const [jwks, hosts] = diff(a, b).changes
    expect(jwks).toEqual({
      key: 'auth.jwt.jwks_url',
      change: 'changed',
      from: 'https://idp.example/jwks',
      to: 'https://svc:***@idp.example/jwks',
      restart_needed: true,
      masked: true,
    })
    expect(hosts.key).toBe('allowed_hosts')
    expect(hosts.to).toMatch(/^\["host-0\.example\.com",.*… \(\d+ more characters\)$/)
    expect(String(hosts.to).length).toBeLessThan(260)
  })

  test('a policy rewritten wholesale lists at most the bound and says how many more changed', () => {
    const rules = (effect: string) => Array.from({ length: 60 }, (_, i) => ({ identity: `user-${i}`, tool: `tool-${i}`, effect }))
    const a = load({ ...BASE, policy: { default: 'allow', rules: rules('deny') } })
    const b = load({ ...BASE, policy: { default: 'deny', rules: rules('allow') } })
    const d = diff(a, b)
    expect(d.changes).toHaveLength(MAX_LISTED_CHANGES)
    expect(d.summary).toEqual({ changed_keys: 61, changed_keys_not_listed: 61 - MAX_LISTED_CHANGES })
    expect(d.changes[0]).toEqual({ key: 'policy.default', change: 'changed', from: 'allow', to: 'deny', restart_needed: false })
    expect(diff(a, b, 3).changes.map((c) => c.key)).toEqual(['policy.default', 'policy.rules[0].effect', 'policy.rules[1].effect'])
  })

  test('rules read from a policy_file are compared too, under policy_file:', () => {
    const dir = tempDir()
    const policyFile = join(dir, 'policy.yaml')
    const configFile = join(dir, 'wardline.yaml')
    writeFileSync(configFile, yaml.dump({ ...BASE, policy: undefined, policy_file: 'policy.yaml' }))
    writeFileSync(policyFile, yaml.dump({ default: 'allow', rules: [{ identity: 'bob', tool: 'rm', effect: 'deny' }] }))
    const a = loadConfig(configFile, {})
    writeFileSync(policyFile, yaml.dump({ default: 'allow', rules: [{ identity: 'bob', tenant: 'acme', tool: 'rm', effect: 'deny' }] }))
    const b = loadConfig(configFile, {})
    expect(diff(a, b).changes).toEqual([{ key: 'policy_file:rules[0].tenant', change: 'added', to: 'acme', restart_needed: false }])
  })

  test('a config not made by the loader (a copy) diffs as empty rather than failing', () => {
    const a = load(BASE)
    expect(diff({ ...a }, load({ ...BASE, listen: '127.0.0.1:1' }))).toEqual({ changes: [], summary: { changed_keys: 0 } })
  })

  test('the origin remembers which variables each key read; configSecrets lists the secret values', () => {
    const c = load(
      { ...BASE, listen: '${WL_L:-127.0.0.1:0}', postgres: { dsn: 'postgres://${PGUSER_X}:${PGPASS_X}@db/w' } },
      { PGUSER_X: 'w', PGPASS_X: 'p%40ss-word-long' },
    )
    expect(configOrigin(c)?.variables.get('listen')).toEqual(['WL_L'])
    expect(configOrigin(c)?.variables.get('postgres.dsn')).toEqual(['PGUSER_X', 'PGPASS_X'])
    expect(configSecrets(c)).toEqual([JWT_SECRET_A, 'postgres://w:p%40ss-word-long@db/w', 'p%40ss-word-long', 'p@ss-word-long'])
  })
})

describe('SIGHUP through a real wardline serve', () => {
  afterEach(() => killServed())

  test('the reload logs each changed key with old and new values, masks secrets, and says what needs a restart', async () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    writeFileSync(file, yaml.dump(BASE))
    const served = await startServe(file)
    writeFileSync(
      file,
      yaml.dump({
        ...BASE,
        auth: { mode: 'jwt', jwt: { secret: JWT_SECRET_B } },
        budget: { ...BASE.budget, limits: [{ requests_per_window: 250, window_seconds: 60 }] },
        postgres: { dsn: 'postgres://wardline:new-db-password@db2.internal/wardline' },
      }),
    )
    served.child.kill('SIGHUP')
    await waitFor(() => served.stderr().includes('configuration key changed') && served.stderr().includes('changed settings take effect'), {
      what: 'the reload to be logged',
    })
    const logged = logRecords(served.stderr())
    expect(logged.find((r) => String(r.message).startsWith('configuration reloaded'))).toMatchObject({
      level: 'info',
      restart_needed_for: ['auth', 'postgres'],
      changed_keys: 3,
    })
    expect(logged.filter((r) => r.message === 'configuration key changed').map(({ timestamp: _t, ...r }) => r)).toEqual([
      {
        level: 'info',
        message: 'configuration key changed',
        key: 'auth.jwt.secret',
        change: 'changed',
        from: '***',
        to: '***',
        restart_needed: true,
        masked: true,
      },
      {
        level: 'info',
        message: 'configuration key changed',
        key: 'budget.limits[0].requests_per_window',
        change: 'changed',
        from: 100,
        to: 250,
        restart_needed: false,
      },
      {
        level: 'info',
        message: 'configuration key changed',
        key: 'postgres.dsn',
        change: 'changed',
        from: 'postgres://wardline:***@db1.internal/wardline',
        to: 'postgres://wardline:***@db2.internal/wardline',
        restart_needed: true,
        masked: true,
      },
    ])
    for (const secret of [JWT_SECRET_A, JWT_SECRET_B, 'old-db-password', 'new-db-password']) expect(served.stderr()).not.toContain(secret)
    expect(await served.stop()).toBe(0)
  })

  test('a file cut before policy: (a write in progress) is refused with one error line, and the denied tool stays denied', async () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    const text = yaml.dump(BASE)
    writeFileSync(file, text)
    const served = await startServe(file)
    const deploy = async (): Promise<number> => {
      const token = await hs({ sub: 'intern-1', exp: hour() }, JWT_SECRET_A)
      const res = await fetch(`${served.url}/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'deploy', arguments: {} } }),
      })
      await res.arrayBuffer()
      return res.status
    }
    expect(await deploy()).toBe(403)
    writeFileSync(file, text.slice(0, text.indexOf('policy:')))
    served.child.kill('SIGHUP')
    await waitFor(() => served.stderr().includes('configuration reload rejected'), { what: 'the refusal to be logged' })
    expect(logRecords(served.stderr()).find((r) => String(r.message).startsWith('configuration reload'))).toMatchObject({
      level: 'error',
      message: 'configuration reload rejected: the running configuration is unchanged',
      config: file,
      problems: [expect.stringMatching(/^policy: set in the running configuration, missing or blank in the file/)],
    })
    expect(await deploy()).toBe(403)
    expect(await served.stop()).toBe(0)
  })

  test('with log_format: text each change is one human line; a value holding a newline cannot forge a line', async () => {
    const dir = tempDir()
    const file = join(dir, 'wardline.yaml')
    const tree = { ...BASE, log_format: 'text' }
    writeFileSync(file, yaml.dump(tree))
    // startServe reads JSON lines; a text-logging child is watched here.
    const child = spawn(process.execPath, [cliMain(), 'serve', '--config', file], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' } })
    let err = ''
    child.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')))
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
    try {
      await waitFor(() => / INFO {2}wardline listening listen=127\.0\.0\.1:\d+ /.test(err), { what: 'the listening line' })
      const forged = 'intern-*\n2026-01-01T00:00:00.000Z ERROR forged'
      writeFileSync(
        file,
        yaml.dump({ ...tree, policy: { default: 'allow', rules: [{ identity: forged, tool: 'deploy', effect: 'deny' }] } }),
      )
      child.kill('SIGHUP')
      await waitFor(() => err.includes('configuration key changed'), { what: 'the reload to be logged' })
      const lines = err.trimEnd().split('\n')
      for (const line of lines) expect(line).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z (ERROR|WARN |INFO |DEBUG) /)
      expect(lines).toContainEqual(
        expect.stringMatching(
          /Z INFO {2}configuration key changed key=policy\.rules\[0\]\.identity change=changed from=intern-\* to="intern-\*\\n2026-01-01T00:00:00\.000Z ERROR forged" restart_needed=false$/,
        ),
      )
      expect(lines).toContainEqual(expect.stringMatching(/Z INFO {2}configuration reloaded: .* restart_needed_for=\[\] changed_keys=1$/))
    } finally {
      child.kill('SIGTERM')
      await exited
    }
  })
})
