/**
 * Logs people can read, through the real CLI: startup errors with their WL_* code in the log format
 * (text on a terminal, JSON otherwise), busy ports that name the key and variable to change, and
 * `wardline token` reading only the auth block.
 */
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { decodeJwt } from 'jose'
import { loadConfig, loadConfigBlocks } from '../../src/config/load'
import { ConfigError } from '../../src/errors'
import { startGateway } from '../../src/server/compose'
import { listenOrExplain } from '../../src/net/listen'
import { silentLogger } from '../../src/log'
import { SECRET } from '../auth/forge'
import { ROOT, cliMain, freePort, occupiedPort, runCli } from '../helpers/cli'
import { tempDir } from '../helpers/harness'

/** Runs the CLI with an environment of the test's choosing (runCli's is fixed, NO_COLOR included). */
function run(args: readonly string[], env: NodeJS.ProcessEnv): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [cliMain(), ...args], { cwd: ROOT, encoding: 'utf8', env, timeout: 20_000 })
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr }
}

/** Runs the CLI on a real pseudo-terminal (util-linux `script`): what an operator at a shell sees, stdout and stderr merged. */
function onTerminal(args: readonly string[], env: NodeJS.ProcessEnv): { code: number; output: string } {
  const command = [process.execPath, cliMain(), ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  const r = spawnSync('script', ['-qec', command, '/dev/null'], { cwd: ROOT, encoding: 'utf8', env, timeout: 20_000 })
  return { code: r.status ?? -1, output: r.stdout.replace(/\r\n/g, '\n') }
}

function writeConfig(dir: string, text: string): string {
  const file = join(dir, 'wardline.yaml')
  writeFileSync(file, text)
  return file
}

/** The one JSON record of a startup failure (anything logged before it is skipped). */
function lastRecord(stderr: string): Record<string, unknown> {
  const lines = stderr.trimEnd().split('\n')
  return JSON.parse(lines[lines.length - 1]) as Record<string, unknown>
}

const TIME = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z'
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
const { NO_COLOR: _ignored, ...ENV_WITHOUT_NO_COLOR } = process.env

describe('startup errors carry their WL_* code, in the log format', () => {
  test('an invalid file with log_format: text gets one human line with the code and every problem, exit 1', () => {
    const file = writeConfig(tempDir(), 'log_format: text\nupstream: nope\nmax_body_bytes: -1\nauth: { mode: header }\n')
    const r = runCli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(
      new RegExp(
        `^${TIME} ERROR configuration invalid: the gateway did not start code=WL_CONFIG_INVALID config=${escape(file)} ` +
          `problems=\\["upstream: must be an absolute URL", "max_body_bytes: must be between 1 and 1073741824"\\]\\n$`,
      ),
    )
  })

  test('on a terminal the same error is a colored human line; NO_COLOR keeps the line and drops the color', () => {
    const file = writeConfig(tempDir(), 'upstream: nope\nauth: { mode: header }\n')
    const colored = onTerminal(['serve', '--config', file], ENV_WITHOUT_NO_COLOR)
    expect(colored.code).toBe(1)
    expect(colored.output).toContain('\x1b[31mERROR\x1b[39m')
    const plain = onTerminal(['serve', '--config', file], { ...ENV_WITHOUT_NO_COLOR, NO_COLOR: '1' })
    expect(plain.code).toBe(1)
    expect(plain.output).toMatch(
      new RegExp(
        `^${TIME} ERROR configuration invalid: the gateway did not start code=WL_CONFIG_INVALID config=${escape(file)} problems=\\["upstream: must be an absolute URL"\\]\\n$`,
      ),
    )
    // log_format: json wins over the terminal.
    const json = onTerminal(
      ['serve', '--config', writeConfig(tempDir(), 'log_format: json\nupstream: nope\nauth: { mode: header }\n')],
      ENV_WITHOUT_NO_COLOR,
    )
    expect(json.code).toBe(1)
    expect(JSON.parse(json.output)).toMatchObject({ level: 'error', code: 'WL_CONFIG_INVALID' })
  })

  test('attack: secrets in an invalid file never reach the problem list, even where a problem quotes the value', () => {
    const file = writeConfig(
      tempDir(),
      [
        'upstream: http://127.0.0.1:1',
        'auth: { mode: jwt, jwt: { secret: short-jwt-secret } }',
        'postgres: { dsn: "mysql://wardline:dsn-password-1@db/wardline" }',
        // checkOrigin quotes a wrong origin back: a URL password in it is masked by its place.
        'allowed_origins: ["https://ops:origin-password@app.example.com/path"]',
      ].join('\n'),
    )
    const r = runCli(['serve', '--config', file])
    expect(r.code).toBe(1)
    const record = lastRecord(r.stderr)
    expect(record.problems).toEqual([
      'postgres.dsn: must be a postgres:// or postgresql:// URL (its value is not shown)',
      expect.stringMatching(/^allowed_origins\[0\]: must be an origin .*, not "https:\/\/ops:\*\*\*@app\.example\.com\/path"$/),
      'auth.jwt.secret: must be at least 32 bytes (its value is not shown)',
    ])
    for (const secret of ['short-jwt-secret', 'dsn-password-1', 'origin-password']) expect(r.stderr).not.toContain(secret)
  })

  test('an unreachable Postgres with on_store_error closed is WL_POSTGRES_UNAVAILABLE, and the DSN password never shows', async () => {
    const port = await freePort() // a port nobody listens on any more
    const dir = tempDir()
    const password = 'hunter2-is-the-db-password'
    const file = writeConfig(
      dir,
      [
        'listen: 127.0.0.1:0',
        'upstream: http://127.0.0.1:1',
        'auth: { mode: header }',
        `audit: { output: ${join(dir, 'audit.jsonl')}, spill_file: ${join(dir, 'spill.jsonl')} }`,
        'features: { budget_enforcement: true, postgres_storage: true }',
        'budget: { requests_per_window: 10, window_seconds: 60, on_store_error: closed }',
        `postgres: { dsn: "postgres://wardline:${password}@127.0.0.1:${port}/wardline" }`,
      ].join('\n'),
    )
    const r = runCli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(lastRecord(r.stderr)).toMatchObject({
      level: 'error',
      code: 'WL_POSTGRES_UNAVAILABLE',
      config: file,
      message: 'cannot start: postgres is unreachable',
      cause: expect.stringContaining(`ECONNREFUSED 127.0.0.1:${port}`) as unknown,
    })
    expect(r.stderr).not.toContain(password)
  })
})

describe('a busy port names the key and the variable to change', () => {
  let occupied: Awaited<ReturnType<typeof occupiedPort>>
  beforeEach(async () => {
    occupied = await occupiedPort()
  })
  afterEach(async () => {
    await occupied.release()
  })

  const config = (dir: string, listen: string) =>
    writeConfig(
      dir,
      `listen: ${listen}\nupstream: http://127.0.0.1:1\nauth: { mode: header }\naudit: { output: ${join(dir, 'a.jsonl')} }\n`,
    )

  test('listen read from ${WARDLINE_LISTEN} set in the environment: the message names the variable', () => {
    const file = config(tempDir(), '${WL_LOGS_TEST_LISTEN:-127.0.0.1:8080}')
    const r = run(['serve', '--config', file], { ...process.env, WL_LOGS_TEST_LISTEN: `127.0.0.1:${occupied.port}` })
    expect(r.code).toBe(1)
    expect(lastRecord(r.stderr)).toMatchObject({
      code: 'WL_LISTEN_FAILED',
      message: `cannot start: listen 127.0.0.1:${occupied.port} is already in use (another process listens there): change listen in ${file} (the file reads it from WL_LOGS_TEST_LISTEN: set that variable or edit the key)`,
    })
  })

  test('the default of ${VAR:-default} still names the variable: setting it is how to move the port', () => {
    const file = config(tempDir(), `\${WL_LOGS_TEST_UNSET_LISTEN:-127.0.0.1:${occupied.port}}`)
    const r = runCli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(String(lastRecord(r.stderr).message)).toContain(
      '(the file reads it from WL_LOGS_TEST_UNSET_LISTEN: set that variable or edit the key)',
    )
  })

  test('a literal listen names only the key and the file', () => {
    const file = config(tempDir(), `127.0.0.1:${occupied.port}`)
    const r = runCli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(lastRecord(r.stderr)).toMatchObject({
      code: 'WL_LISTEN_FAILED',
      message: `cannot start: listen 127.0.0.1:${occupied.port} is already in use (another process listens there): change listen in ${file}`,
    })
  })

  test('an address this host does not have is said so, in process too (startGateway rejects with WL_LISTEN_FAILED)', async () => {
    const dir = tempDir()
    const file = config(dir, '${WL_LOGS_TEST_LISTEN}')
    const loaded = loadConfig(file, { WL_LOGS_TEST_LISTEN: '192.0.2.1:8080' }) // TEST-NET-1: never an address of this host
    const started = startGateway(loaded, { log: silentLogger() })
    await expect(started).rejects.toThrow(
      `listen 192.0.2.1:8080 is not an address of this host: change listen in ${file} (the file reads it from WL_LOGS_TEST_LISTEN: set that variable or edit the key)`,
    )
    await expect(started).rejects.toMatchObject({ code: 'WL_LISTEN_FAILED', cause: { code: 'EADDRNOTAVAIL' } })
  })

  test('listenOrExplain serves any listener: another key (admin.listen) is named the same way', async () => {
    const other = createServer()
    const config = loadConfig(
      writeConfig(tempDir(), `upstream: http://127.0.0.1:1\nauth: { mode: header }\naudit: { output: stdout }\n`),
      {},
    )
    await expect(listenOrExplain(other, { host: '127.0.0.1', port: occupied.port }, 'admin.listen', config)).rejects.toThrow(
      /^admin\.listen 127\.0\.0\.1:\d+ is already in use \(another process listens there\): change admin\.listen in \S+wardline\.yaml$/,
    )
    expect(other.listening).toBe(false)
  })
})

describe('wardline token reads only the auth block', () => {
  const unrelated = [
    'upstream: ${WL_LOGS_TEST_UNSET_UPSTREAM}',
    'features: { postgres_storage: true }',
    'postgres: { dsn: "${WL_LOGS_TEST_UNSET_DSN}" }',
    'audit: { output: "${WL_LOGS_TEST_UNSET_AUDIT}" }',
    'budget: { requests_per_window: "${WL_LOGS_TEST_UNSET_LIMIT}" }',
  ]

  test('variables of other keys that are unset do not stop it; check-config still says the file needs them', () => {
    const file = writeConfig(
      tempDir(),
      [...unrelated, `auth: { mode: jwt, jwt: { secret: "\${WL_LOGS_TEST_SECRET}", issuer: wl } }`].join('\n'),
    )
    const env = { ...process.env, WL_LOGS_TEST_SECRET: SECRET }
    const r = run(['token', '--config', file, '--sub', 'alice', '--tenant', 'acme'], env)
    expect(r.code).toBe(0)
    expect(r.stderr).toMatch(/^wardline: token jti [\w-]+ \(revoke this token alone: wardline revoke --jti [\w-]+\)\n$/) // nothing else
    expect(decodeJwt(r.stdout.trim())).toMatchObject({ sub: 'alice', tenant: 'acme', iss: 'wl' })
    const check = run(['check-config', '--config', file], env)
    expect(check.code).toBe(1)
    expect(check.stderr).toContain('postgres.dsn: environment variable WL_LOGS_TEST_UNSET_DSN is not set')
  })

  test("the auth block's own problems still fail it, and only those are reported", () => {
    const file = writeConfig(tempDir(), [...unrelated, 'auth: { mode: jwt, jwt: { secret: "${WL_LOGS_TEST_UNSET_SECRET}" } }'].join('\n'))
    const r = run(['token', '--config', file, '--sub', 'alice'], process.env)
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toContain('auth.jwt.secret: environment variable WL_LOGS_TEST_UNSET_SECRET is not set')
    expect(r.stderr).not.toMatch(/WL_LOGS_TEST_UNSET_(DSN|UPSTREAM|AUDIT|LIMIT)/)
  })

  test('loadConfigBlocks gives the same auth config loadConfig gives, relative key files included', () => {
    const dir = tempDir()
    const file = writeConfig(
      dir,
      'upstream: http://127.0.0.1:1\naudit: { output: stdout }\nlog_format: text\nauth: { mode: jwt, jwt: { public_key_file: keys/pub.pem, algorithms: [RS256], audience: [a, b] } }\n',
    )
    const blocks = loadConfigBlocks(file, ['auth', 'log_format'], {})
    expect(blocks.auth).toEqual(loadConfig(file, {}).auth)
    expect(blocks.log_format).toBe('text')
    expect(Object.isFrozen(blocks.auth)).toBe(true)
    expect(() => loadConfigBlocks(join(dir, 'missing.yaml'), ['auth'])).toThrow(ConfigError)
    const bad = writeConfig(tempDir(), 'upstream: 5\nlog_format: loud\n')
    expect(() => loadConfigBlocks(bad, ['log_format'])).toThrow(new ConfigError(['log_format: must be auto, json or text']))
  })
})
