/**
 * Red team (ops): application logs, the reload diff, busy ports and `wardline token`. Each test is an
 * attack: a secret reaching a log line, a caller-controlled value that reads as something else, a
 * meta value that breaks the text format, a message that names the wrong thing to change.
 */
import { createServer } from 'node:net'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import yaml from 'js-yaml'
import { terminalSafe } from '../../src/terminal-table'
import { configSecrets, diffConfigs } from '../../src/config/diff'
import { loadConfigBlocks, parseConfig } from '../../src/config/load'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import type { Config } from '../../src/config/types'
import { ConfigError } from '../../src/errors'
import { addLogSecrets, createLogger, formatValue, redactText } from '../../src/log'
import { listenOrExplain } from '../../src/net/listen'
import { occupiedPort, runCli } from '../helpers/cli'
import { tempDir } from '../helpers/harness'

const JWT_SECRET = 'jwt-secret-0123456789abcdef-0123456789'
const BASE = {
  listen: '127.0.0.1:0',
  upstream: 'http://127.0.0.1:1',
  auth: { mode: 'jwt', jwt: { secret: JWT_SECRET } },
  audit: { output: 'stdout' },
}
const load = (tree: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Config => parseConfig(yaml.dump(tree), { env, baseDir: '/srv' })

/** A logger writing to a string, in one format, seeded with `secrets`. */
function capture(format: 'json' | 'text', secrets: readonly string[] = []) {
  const stream = new PassThrough()
  let text = ''
  stream.on('data', (c: Buffer) => (text += c.toString('utf8')))
  const log = createLogger('debug', { format, stream, tty: false, env: {}, secrets })
  return { log, text: () => text }
}

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

describe('secrets in URL query strings', () => {
  // upstream refuses a query or credentials; auth.jwt.jwks_url accepts both (an IdP or an Azure
  // Function that wants `?code=`), and the JWKS refresh warning logs the URL.
  const KEY = 'AzFnKeyq8Zr2mExample77=='
  const jwks = (code: string): Record<string, unknown> => ({
    mode: 'jwt',
    jwt: { jwks_url: `https://idp.example/api/jwks?code=${code}&tenant=eu`, algorithms: ['RS256'] },
  })

  test.each(['json', 'text'] as const)('the JWKS refresh warning does not print the key in jwks_url (%s)', async (format) => {
    const config = load({ ...BASE, auth: jwks(KEY) })
    const { log, text } = capture(format, configSecrets(config))
    log.warn('cannot refresh the JWKS; verifying with the keys already known', {
      jwks_url: `https://idp.example/api/jwks?code=${KEY}&tenant=eu`,
      error: 'HTTP 500',
    })
    await flush()
    expect(text()).not.toContain(KEY)
    expect(text()).toContain('tenant=eu') // the rest of the URL still says where it points
  })

  test('redactText masks credential-named query parameters of any URL, and nothing else', () => {
    for (const [name, value] of [
      ['api_key', 'k-1234567890'],
      ['apiKey', 'k-1234567890'],
      ['access_token', 'tok.abc.def'],
      ['client_secret', 's3cr3tvalue'],
      ['X-Amz-Signature', 'abcdef0123'],
      ['token', 'x'],
      ['sig', 'abcdef=='],
      ['password', 'pw'],
    ]) {
      const out = redactText(`GET https://h.example/x?a=1&${name}=${value}&b=2 failed`, [])
      expect(out).toBe(`GET https://h.example/x?a=1&${name}=***&b=2 failed`)
    }
    expect(redactText('https://h.example/x?page=2&monkey=banana&keyboard=us', [])).toBe(
      'https://h.example/x?page=2&monkey=banana&keyboard=us',
    )
    expect(redactText('not a url: a=1&token=x', [])).toBe('not a url: a=1&token=x')
  })

  test('a reload that changes a jwks_url carrying a key shows neither key', () => {
    const before = load({ ...BASE, auth: jwks(KEY) })
    const after = load({ ...BASE, auth: jwks(`new-${KEY}`) })
    const diff = diffConfigs(before, after, keysNeedingRestart(before, after))
    expect(JSON.stringify(diff)).not.toContain(KEY)
    expect(diff.changes).toEqual([
      {
        key: 'auth.jwt.jwks_url',
        change: 'changed',
        from: '***',
        to: '***',
        restart_needed: true,
        masked: true,
      },
    ])
  })
})

describe('a DSN password holding an unescaped @', () => {
  // new URL() takes the last @ of the authority as the end of the password, so
  // postgres://wardline:p@ss-word-42@db/x connects with password "p@ss-word-42".
  const dsn = (host: string): string => `postgres://wardline:p@ss-word-42@${host}/wardline`

  test('a reload diff of postgres.dsn shows no part of the password', () => {
    const before = load({ ...BASE, postgres: { dsn: dsn('db1') } })
    const after = load({ ...BASE, postgres: { dsn: dsn('db2') } })
    const diff = diffConfigs(before, after, keysNeedingRestart(before, after))
    expect(JSON.stringify(diff)).not.toContain('word-42')
    expect(diff.changes[0]).toMatchObject({
      key: 'postgres.dsn',
      from: 'postgres://wardline:***@db1/wardline',
      to: 'postgres://wardline:***@db2/wardline',
    })
  })

  test('redactText masks it whole in any URL', () => {
    expect(redactText(`connect ${dsn('db')} failed`, [])).toBe('connect postgres://wardline:***@db/wardline failed')
    expect(redactText('see https://u:pw@h/x, mail bob@example.com', [])).toBe('see https://u:***@h/x, mail bob@example.com')
  })
})

describe('a secret moved between keys', () => {
  test('the old JWT secret put under a non-secret key on reload is masked in the diff lines', async () => {
    const before = load(BASE)
    const after = load({ ...BASE, auth: { mode: 'jwt', jwt: { secret: `new-${JWT_SECRET}`, issuer: JWT_SECRET } } })
    const { log, text } = capture('json', configSecrets(before))
    addLogSecrets(log, configSecrets(after)) // serve's reload adds the new file's secrets before the diff is logged
    for (const change of diffConfigs(before, after, keysNeedingRestart(before, after)).changes)
      log.info('configuration key changed', { ...change })
    await flush()
    expect(text()).toContain('auth.jwt.issuer')
    expect(text()).not.toContain(JWT_SECRET)
  })

  test('a value moved INTO a secret key from a plain one is masked too (added to the secrets before the diff is logged)', async () => {
    const value = 'was-an-issuer-now-the-secret-0123456789'
    const before = load({ ...BASE, auth: { mode: 'jwt', jwt: { secret: JWT_SECRET, issuer: value } } })
    const after = load({ ...BASE, auth: { mode: 'jwt', jwt: { secret: value } } })
    const { log, text } = capture('text', configSecrets(before))
    addLogSecrets(log, configSecrets(after))
    for (const change of diffConfigs(before, after, keysNeedingRestart(before, after)).changes)
      log.info('configuration key changed', { ...change })
    await flush()
    expect(text()).toContain('auth.jwt.issuer')
    expect(text()).not.toContain(value)
  })
})

describe('text format: caller-controlled values and odd meta', () => {
  test('invisible characters in a bare value are shown: a tool "admin\\u200b" does not read as "admin"', () => {
    for (const invisible of ['\u200b', '\u200c', '\u200d', '\u2060', '\ufeff', '\u00ad', '\u061c', '\u180e']) {
      expect(formatValue(`admin${invisible}`)).not.toBe('admin')
      expect(formatValue(`admin${invisible}`)).toMatch(/\\(x|u0*)[0-9a-f]{2,4}/)
    }
  })

  test('the audit table shows them too', () => {
    expect(terminalSafe('admin\u200b')).toBe('admin\\u200b')
    expect(terminalSafe('a\u2028b\u200fc')).toBe('a\\u2028b\\u200fc')
  })

  test('circular, BigInt-bearing, Error-with-cause and Symbol-keyed meta: one line each, no throw, secrets masked', async () => {
    const { log, text } = capture('text')
    const loop: Record<string, unknown> = { a: 1 }
    loop.self = loop
    const cause = new Error('connect to postgres://wardline:hunter2-long-pw@db:5432/x refused')
    log.warn('circular', { loop })
    log.warn('bigint', { nested: { n: 10n } })
    log.warn('error', { error: new Error('query failed', { cause }) })
    log.warn('symbol', { [Symbol('s')]: 1, plain: 'v' })
    await flush()
    const lines = text().trimEnd().split('\n')
    expect(lines).toHaveLength(4)
    expect(lines[0]).toMatch(/ WARN {2}circular loop=\[unserializable\]$/)
    expect(lines[1]).toMatch(/ WARN {2}bigint nested=\[unserializable\]$/)
    expect(text()).not.toContain('hunter2-long-pw')
    expect(lines[3]).toMatch(/ WARN {2}symbol plain=v$/)
  })

  test('JSON format with circular meta stays one parseable line', async () => {
    const { log, text } = capture('json')
    const loop: Record<string, unknown> = { a: 1 }
    loop.self = loop
    log.warn('circular', { loop })
    await flush()
    expect(text().trimEnd().split('\n')).toHaveLength(1)
    expect(JSON.parse(text())).toMatchObject({ message: 'circular', loop: { a: 1 } })
  })
})

describe('busy ports name what to change', () => {
  let port: number
  let release: () => Promise<void>
  beforeAll(async () => {
    ;({ port, release } = await occupiedPort())
  })
  afterAll(() => release())

  test('listen made of two defaulted variables names both', async () => {
    const config = parseConfig(yaml.dump({ ...BASE, listen: '${WL_HOST:-127.0.0.1}:${WL_PORT:-8080}' }), { env: { WL_PORT: String(port) } })
    const err = await listenOrExplain(createServer(), config.listen, 'listen', config).then(
      () => null,
      (e: Error) => e,
    )
    expect(err?.message).toBe(
      `listen 127.0.0.1:${port} is already in use (another process listens there): change listen (it reads it from WL_HOST, WL_PORT: set those variables or edit the key)`,
    )
  })

  test('an IPv6 host is bracketed in the message', async () => {
    const v6 = createServer()
    const ok = await new Promise<boolean>((resolve) => {
      v6.once('error', () => resolve(false))
      v6.listen(0, '::1', () => resolve(true))
    })
    if (!ok) return // no IPv6 loopback on this machine: nothing to attack
    try {
      const p = (v6.address() as { port: number }).port
      const config = load({ ...BASE, listen: `[::1]:${p}` })
      await expect(listenOrExplain(createServer(), config.listen, 'listen', config)).rejects.toThrow(`listen [::1]:${p} is already in use`)
    } finally {
      v6.close()
    }
  })
})

describe('wardline token reads only the auth block', () => {
  const dir = tempDir('wardline-redteam-ops-token-')

  test('a wrong type, an unknown key and an unset variable outside auth do not stop it', () => {
    const file = join(dir, 'broken-elsewhere.yaml')
    writeFileSync(
      file,
      `upstream: \${UNSET_UPSTREAM_VAR}\nbudget: 5\nbogus_key: 1\npostgres: { dsn: 12 }\nauth: { mode: jwt, jwt: { secret: ${JWT_SECRET} } }\n`,
    )
    expect((loadConfigBlocks(file, ['auth'], {}).auth as { jwt: { secret: string } }).jwt.secret).toBe(JWT_SECRET)
    const r = runCli(['token', '--config', file, '--sub', 'alice'])
    expect(r.code).toBe(0)
    expect(r.stderr).toMatch(/^wardline: token jti [\w-]+ \(revoke this token alone: wardline revoke --jti [\w-]+\)\n$/) // nothing else
    expect(r.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/)
  })

  test('a YAML syntax error anywhere in the file stops it with one precise line and exit 1, and no secret', () => {
    const file = join(dir, 'bad-yaml.yaml')
    writeFileSync(file, `auth: { mode: jwt, jwt: { secret: ${JWT_SECRET} } }\nbudget: [1, 2\n`)
    expect(() => loadConfigBlocks(file, ['auth'], {})).toThrow(ConfigError)
    const r = runCli(['token', '--config', file, '--sub', 'alice'])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    expect(r.stderr).toMatch(/not valid YAML/)
    expect(r.stderr).not.toContain(JWT_SECRET)
  })
})
