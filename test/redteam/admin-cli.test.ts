// Red team: the admin: block, the CLI wrappers and the admin listener's logs.
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import yaml from 'js-yaml'
import { adminBaseUrl } from '../../src/admin/client'
import { untilTime } from '../../src/cli/admin'
import { createLogger } from '../../src/log'
import { startGateway } from '../../src/server/compose'
import { ROOT, cliMain, runCli } from '../helpers/cli'
import { MCP_HEADERS, configFrom, configProblems, tempDir, toolCall } from '../helpers/harness'

const TOKEN = 'b'.repeat(40)
const BASE = `listen: 127.0.0.1:8080\nupstream: http://127.0.0.1:3001\nauth: {mode: header}\n`

describe('admin.token that could never be sent back equal', () => {
  test.each([
    ['a trailing newline (an env file read with $(cat))', `${TOKEN}\n`],
    ['a space inside', `${TOKEN.slice(0, 20)} ${TOKEN.slice(20)}`],
    ['a non-ASCII character', `${TOKEN}é`],
    ['a tab', `${TOKEN}\t`],
  ])('%s is refused at load, without its value', (_name, token) => {
    // Loaded, each would make every admin call (the CLI's too, from this very config) get 401.
    const problems = configProblems(`${BASE}admin: {listen: 127.0.0.1:9090, token: '\${T}'}\n`, '/srv', { T: token })
    expect(problems).toEqual([
      'admin.token: must be printable ASCII without spaces or line breaks (its value is not shown; openssl rand -hex 32 makes one)',
    ])
    expect(problems.join('\n')).not.toContain(TOKEN)
  })

  test('every printable ASCII character is fine (a token from a password manager)', () => {
    const token = `${TOKEN}!"#$%&'()*+,-./:;<=>?@[\\]^_\`{|}~`
    expect(
      configFrom(
        { upstream: 'http://127.0.0.1:3001', auth: { mode: 'header' }, admin: { listen: '127.0.0.1:9090', token: '${T}' } },
        { T: token },
      ).admin?.token,
    ).toBe(token)
  })
})

describe('where the CLI connects', () => {
  test.each([
    ['0.0.0.0', 9090, 'http://127.0.0.1:9090'],
    ['::', 9090, 'http://[::1]:9090'],
    ['::1', 9090, 'http://[::1]:9090'],
    ['localhost', 9090, 'http://localhost:9090'],
  ])('admin.listen %s:%d → %s', (host, port, url) => {
    expect(adminBaseUrl({ listen: { host, port }, token: TOKEN, tls: null })).toBe(url)
  })

  test('[::]:port in the file reads as :: and reaches ::1', () => {
    const admin = configFrom({
      upstream: 'http://127.0.0.1:3001',
      auth: { mode: 'header' },
      admin: { listen: '[::]:9090', token: TOKEN },
    }).admin
    expect(admin?.listen).toEqual({ host: '::', port: 9090 })
    expect(adminBaseUrl(admin!)).toBe('http://[::1]:9090')
  })

  test('admin.listen [::]:8080 next to listen 0.0.0.0:8080 is refused (both wildcards)', () => {
    expect(
      configProblems(
        `listen: 0.0.0.0:8080\nupstream: http://127.0.0.1:3001\nauth: {mode: header}\nadmin: {listen: '[::]:8080', token: ${TOKEN}}\n`,
      ),
    ).toEqual(['admin.listen: must differ from listen (0.0.0.0:8080): the admin API needs its own listener'])
  })

  test('port 0 in the file: the CLI says it cannot know the port (one line, exit 1)', () => {
    const dir = tempDir('wardline-rt-admin-')
    const file = join(dir, 'zero.yaml')
    writeFileSync(
      file,
      yaml.dump({
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:3001',
        auth: { mode: 'header' },
        admin: { listen: '127.0.0.1:0', token: TOKEN },
      }),
    )
    const r = runCli(['budget', 'show', '--config', file])
    expect(r.code).toBe(1)
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1)
    // Not "cannot reach the admin API at http://127.0.0.1:0 (…): is the gateway running with this admin.listen?", which misleads.
    expect(r.stderr).toBe(`wardline: ${file}: admin.listen has port 0, so the CLI cannot know the admin API's port: set a fixed port\n`)
  })
})

describe('--until', () => {
  test('a duration past the year 9999 gets a precise message, not "Invalid time value"', () => {
    expect(() => untilTime('100000000d', Date.now())).toThrow('--until 100000000d ends after the year 9999')
    expect(() => untilTime('99999999999999999999s', Date.now())).toThrow('ends after the year 9999')
    expect(untilTime('90s', 0)).toBe('1970-01-01T00:01:30.000Z')
  })

  test('through the CLI: one line, exit 1, no request made', () => {
    const dir = tempDir('wardline-rt-admin-')
    const file = join(dir, 'w.yaml')
    writeFileSync(
      file,
      yaml.dump({
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:3001',
        auth: { mode: 'header' },
        admin: { listen: '127.0.0.1:1', token: TOKEN },
      }),
    )
    const r = runCli(['revoke', '--config', file, '--identity', 'alice', '--tenant', 'default', '--until', '100000000d'])
    expect(r.code).toBe(1)
    expect(r.stderr).toBe('wardline: --until 100000000d ends after the year 9999\n')
  })
})

describe('a gateway that hangs', () => {
  let server: Server
  let port: number
  beforeAll(async () => {
    // Answers the headers of a 200, then never sends the body (a stuck proxy, a half-dead process).
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
      res.write('{"scope":')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    port = (server.address() as AddressInfo).port
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  })

  test('a revoke against it says the change may still be applied', async () => {
    const dir = tempDir('wardline-rt-admin-')
    const file = join(dir, 'hang.yaml')
    writeFileSync(
      file,
      yaml.dump({
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:3001',
        auth: { mode: 'header' },
        admin: { listen: `127.0.0.1:${port}`, token: TOKEN },
      }),
    )
    const child = spawn(
      process.execPath,
      [cliMain(), 'revoke', '--identity', 'alice', '--tenant', 'acme', '--config', file, '--timeout', '1'],
      {
        cwd: ROOT,
        env: { ...process.env, NO_COLOR: '1' },
      },
    )
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
    expect({ code, stderr }).toEqual({
      code: 1,
      stderr: `wardline: the admin API at http://127.0.0.1:${port} did not answer within 1 s (the change may still be applied: check before retrying)\n`,
    })
  })

  test('headers then silence: --timeout still ends it with the timeout line, exit 1', async () => {
    const dir = tempDir('wardline-rt-admin-')
    const file = join(dir, 'hang.yaml')
    writeFileSync(
      file,
      yaml.dump({
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:3001',
        auth: { mode: 'header' },
        admin: { listen: `127.0.0.1:${port}`, token: TOKEN },
      }),
    )
    // Spawned, not spawnSync: this process's event loop serves the hanging server meanwhile.
    const child = spawn(process.execPath, [cliMain(), 'budget', 'show', '--config', file, '--timeout', '1'], {
      cwd: ROOT,
      env: { ...process.env, NO_COLOR: '1' },
    })
    let stderr = ''
    let stdout = ''
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()))
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
    // The body read's abort must stay inside the client's handling (not "wardline: This operation was aborted").
    expect({ code, stdout, stderr }).toEqual({
      code: 1,
      stdout: '',
      stderr: `wardline: the admin API at http://127.0.0.1:${port} did not answer within 1 s\n`,
    })
  })
})

describe('the admin token in logs', () => {
  test('at debug level, through 401s, 404s, a dropped body and the main listener, the token is never written', async () => {
    const lines = new PassThrough()
    let text = ''
    lines.on('data', (c: Buffer) => (text += c.toString()))
    const upstream = createServer((_req, res) => res.end('{}'))
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    const dir = tempDir('wardline-rt-admin-')
    const config = configFrom(
      {
        listen: '127.0.0.1:0',
        upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
        auth: { mode: 'header' },
        audit: { output: join(dir, 'audit.jsonl') },
        log_level: 'debug',
        admin: { listen: '127.0.0.1:0', token: '${T}' },
      },
      { T: TOKEN },
      dir,
    )
    // No secrets handed to the logger: what is checked is that nothing logs the token, not that it is masked.
    const log = createLogger('debug', { format: 'json', stream: lines })
    const gateway = await startGateway(config, { log })
    try {
      const admin = gateway.adminUrl as string
      await (await fetch(`${admin}/budgets`, { headers: { authorization: `Bearer ${TOKEN}x` } })).text()
      await (await fetch(`${admin}/nowhere`, { headers: { authorization: `Bearer ${TOKEN}` } })).text()
      await (
        await fetch(`${admin}/revocations`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: '{"identity":',
        })
      ).text()
      await (
        await fetch(`${gateway.url}/mcp`, {
          method: 'POST',
          headers: { ...MCP_HEADERS, authorization: `Bearer ${TOKEN}`, 'x-wardline-identity': 'a', 'x-wardline-tenant': 't' },
          body: JSON.stringify(toolCall('echo')),
        })
      ).text()
    } finally {
      await gateway.shutdown()
      upstream.closeAllConnections()
      await new Promise<void>((resolve) => upstream.close(() => resolve()))
    }
    expect(text).toContain('admin API listening')
    expect(text).not.toContain(TOKEN.slice(0, 16))
  })
})
