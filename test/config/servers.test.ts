/**
 * `servers:` and `default_server`: what a file may say, what it defaults to, that a header's value
 * never leaves the process in anything an operator or a caller can read (problems, diffs, logs,
 * check-config), and what a reload does with them.
 */
import { writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { Writable } from 'node:stream'
import yaml from 'js-yaml'
import { configSecrets, diffConfigs } from '../../src/config/diff'
import { parseConfig } from '../../src/config/load'
import { enforcementLost } from '../../src/config/reload-guard'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import type { Config } from '../../src/config/types'
import { configWarnings } from '../../src/config/warnings'
import { createLogger } from '../../src/log'
import { runCli } from '../helpers/cli'
import { MCP_HEADERS, as, configFrom, configProblems, rpc, tempDir } from '../helpers/harness'
import { startServersHarness } from '../helpers/servers'

type Doc = Record<string, unknown>

const REST: Doc = { auth: { mode: 'header' }, audit: { output: 'stdout' } }
const DOCS = 'http://127.0.0.1:3001/mcp'
const TICKETS = 'http://127.0.0.1:3002/mcp'
const TOKEN = 'docs-token-9f8e7d6c5b4a3210'

const problems = (doc: Doc, env: NodeJS.ProcessEnv = {}): string[] => configProblems(yaml.dump(doc), '/srv', env)
const load = (doc: Doc, env: NodeJS.ProcessEnv = {}): Config => parseConfig(yaml.dump(doc), { env, baseDir: '/srv' })
const withServers = (servers: Doc, more: Doc = {}): Doc => ({ ...REST, servers, ...more })

describe('names', () => {
  test('a name that is not a path segment of one spelling is refused, each one named', () => {
    const bad = ['Docs', 'a..b', '..', 'a%2Fb', 'a/b', 'a.b', '-docs', '_docs', 'x'.repeat(33), 'dócs']
    const servers = Object.fromEntries([...bad, 'ok'].map((name, i) => [name, { url: `http://127.0.0.1:${3001 + i}/mcp` }]))
    const found = problems(withServers(servers))
    expect(found).toHaveLength(bad.length)
    for (const name of bad)
      expect(found).toContainEqual(expect.stringMatching(new RegExp(`^servers\\.${escape(name)}: is not a valid server name`)))
  })

  test('an empty name says so', () => {
    expect(problems(withServers({ '': { url: DOCS } }))).toEqual([
      expect.stringMatching(/^servers: has an empty name, which is not a valid server name/),
    ])
  })

  test('32 characters, digits first, - and _ inside are names', () => {
    expect(problems(withServers({ ['a'.repeat(32)]: { url: DOCS }, '0-a_b': { url: TICKETS }, '9': { url: DOCS } }))).toEqual([])
  })
})

describe('url', () => {
  test.each([
    ['credentials', 'http://user:pw@127.0.0.1:3001/mcp', /must not carry credentials \(send them with headers/],
    ['a user alone', 'http://user@127.0.0.1:3001/mcp', /must not carry credentials/],
    ['a query', 'http://127.0.0.1:3001/mcp?key=1', /must not have a query/],
    ['an empty query', 'http://127.0.0.1:3001/mcp?', /must not have a query/],
    ['a fragment', 'http://127.0.0.1:3001/mcp#x', /must not have a fragment/],
    ['another scheme', 'ftp://127.0.0.1/mcp', /must use http or https/],
    ['a relative URL', '/mcp', /must be an absolute URL/],
    ['empty text', '', /must not be empty/],
  ])('%s is refused', (_what, url, problem) => {
    expect(problems(withServers({ docs: { url } }))).toEqual([
      expect.stringMatching(new RegExp(`^servers\\.docs\\.url: ${problem.source}`)),
    ])
  })

  test('left out, blank, or a server written with nothing under it: url is required', () => {
    for (const entry of [{}, { url: null }, null, { transport: 'sse' }]) {
      expect(problems(withServers({ docs: entry }))).toEqual([expect.stringMatching(/^servers\.docs\.url: is required/)])
    }
  })

  test('two servers with the same URL are two servers', () => {
    const config = load(withServers({ docs: { url: DOCS }, docs2: { url: DOCS } }))
    expect(config.servers.map((s) => [s.name, s.url])).toEqual([
      ['docs', DOCS],
      ['docs2', DOCS],
    ])
  })

  test('from ${VAR}: read from the environment; unset, one problem naming the key and the variable', () => {
    const doc = withServers({ docs: { url: '${DOCS_URL}' } })
    expect(load(doc, { DOCS_URL: DOCS }).servers[0].url).toBe(DOCS)
    expect(problems(doc)).toEqual(['servers.docs.url: environment variable DOCS_URL is not set'])
    expect(problems(doc, { DOCS_URL: '' })).toEqual(['servers.docs.url: environment variable DOCS_URL is set but empty'])
    // What the variable gave is checked like a literal, and never quoted (it could hold a password).
    const found = problems(doc, { DOCS_URL: 'http://u:hunter2-long-pw@127.0.0.1:3001/mcp' })
    expect(found).toEqual([expect.stringMatching(/^servers\.docs\.url: must not carry credentials/)])
    expect(found.join('\n')).not.toContain('hunter2')
  })
})

describe('headers', () => {
  const refused = [
    'Connection',
    'Keep-Alive',
    'Proxy-Connection',
    'Transfer-Encoding',
    'TE',
    'Trailer',
    'Upgrade',
    'Proxy-Authorization',
    'Proxy-Authenticate',
    'Host',
    'Content-Length',
    'Expect',
    'Content-Type',
    'Content-Encoding',
    'Accept',
    'X-Forwarded-For',
    'X-Forwarded-Host',
    'X-Forwarded-Proto',
    'Forwarded',
    'Mcp-Session-Id',
    'MCP-Protocol-Version',
    'Mcp-Method',
    'Mcp-Name',
    'Last-Event-ID',
    'X-Wardline-Identity',
    'x-wardline-tenant',
    'X-Wardline-Anything',
  ]

  test('a header the connection, the client or the gateway owns cannot be set: each is named, with why', () => {
    const headers = Object.fromEntries(refused.map((h) => [h, 'some-value-0123456789']))
    const found = problems(withServers({ docs: { url: DOCS, headers } }))
    expect(found).toHaveLength(refused.length)
    for (const h of refused)
      expect(found).toContainEqual(expect.stringMatching(new RegExp(`^servers\\.docs\\.headers\\.${h}: cannot be set: \\S`)))
    expect(found.filter((p) => p.includes('hop-by-hop'))).toHaveLength(9)
    expect(found.join('\n')).not.toContain('some-value')
  })

  test('credentials and other headers are sent as given, names lower-cased, values trimmed', () => {
    const config = load(
      withServers({
        docs: { url: DOCS, headers: { Authorization: `Bearer ${TOKEN}`, 'X-Api-Key': ' k-1 ', Cookie: 'a=b', 'X-Tenant': 'acme' } },
      }),
    )
    expect(config.servers[0].headers).toEqual({ authorization: `Bearer ${TOKEN}`, 'x-api-key': 'k-1', cookie: 'a=b', 'x-tenant': 'acme' })
  })

  test('one name given twice in two casings is a problem, not a guess', () => {
    expect(
      problems(
        withServers({ docs: { url: DOCS, headers: { Authorization: 'Bearer a-long-token-1', authorization: 'Bearer a-long-token-2' } } }),
      ),
    ).toEqual(['servers.docs.headers.authorization: is given twice (header names are case-insensitive)'])
  })

  test('a name that is not a token is refused', () => {
    expect(problems(withServers({ docs: { url: DOCS, headers: { 'X Api': 'v', 'X:Api': 'v' } } }))).toEqual([
      expect.stringMatching(/^servers\.docs\.headers\.X Api: is not a valid header name/),
      expect.stringMatching(/^servers\.docs\.headers\.X:Api: is not a valid header name/),
    ])
  })

  test('a value with CR, LF or NUL, control characters, empty, blank or not text: refused, and the value never shown', () => {
    const secret = 'SECRET-VALUE-0123456789'
    const headers = {
      'X-Cr': `${secret}\r\nX-Injected: 1`,
      'X-Lf': `${secret}\nmore`,
      'X-Nul': `${secret}\0`,
      'X-Ctl': `${secret}\x07`,
      'X-Empty': '',
      'X-Spaces': '   ',
      'X-Blank': null,
      'X-Number': 5,
    }
    const found = problems(withServers({ docs: { url: DOCS, headers } }))
    expect(found).toEqual([
      'servers.docs.headers.X-Cr: must not contain a line break or NUL (its value is not shown)',
      'servers.docs.headers.X-Lf: must not contain a line break or NUL (its value is not shown)',
      'servers.docs.headers.X-Nul: must not contain a line break or NUL (its value is not shown)',
      'servers.docs.headers.X-Ctl: must be printable Latin-1 text (its value is not shown)',
      'servers.docs.headers.X-Empty: must not be empty',
      'servers.docs.headers.X-Spaces: must not be blank (only spaces)',
      'servers.docs.headers.X-Blank: must have a value (to send no such header, remove it)',
      'servers.docs.headers.X-Number: must be a string',
    ])
    expect(found.join('\n')).not.toContain('SECRET')
  })

  test('from ${VAR}: expanded; unset names the key and the variable; a line break from the environment is refused unseen', () => {
    const doc = withServers({ docs: { url: DOCS, headers: { Authorization: 'Bearer ${DOCS_TOKEN}' } } })
    expect(load(doc, { DOCS_TOKEN: TOKEN }).servers[0].headers).toEqual({ authorization: `Bearer ${TOKEN}` })
    expect(problems(doc)).toEqual(['servers.docs.headers.Authorization: environment variable DOCS_TOKEN is not set'])
    const found = problems(doc, { DOCS_TOKEN: `${TOKEN}\r\nX-Injected: 1` })
    expect(found).toEqual(['servers.docs.headers.Authorization: must not contain a line break or NUL (its value is not shown)'])
    expect(found.join('\n')).not.toContain(TOKEN)
  })

  test('a mapping is required', () => {
    expect(problems(withServers({ docs: { url: DOCS, headers: `Authorization: Bearer ${TOKEN}` } }))).toEqual([
      'servers.docs.headers: must be a mapping',
    ])
  })
})

describe('the rest of a server, and the file around it', () => {
  test('transport is streamable or sse, nothing else', () => {
    for (const transport of ['http', 'SSE', 'websocket', 1]) {
      expect(problems(withServers({ docs: { url: DOCS, transport } }))).toEqual(['servers.docs.transport: must be streamable or sse'])
    }
    expect(
      load(withServers({ docs: { url: DOCS }, old: { url: 'http://127.0.0.1:3003/sse', transport: 'sse' } })).servers.map(
        (s) => s.transport,
      ),
    ).toEqual(['streamable', 'sse'])
  })

  test('timeout_seconds, connections and health_check default to the upstream_ keys; a server may set its own', () => {
    const doc = withServers(
      {
        plain: { url: DOCS },
        blank: { url: DOCS, timeout_seconds: null, connections: null, health_check: null },
        own: { url: TICKETS, timeout_seconds: 5, connections: 3, health_check: { interval_seconds: 1 } },
        off: { url: TICKETS, health_check: { enabled: false } },
      },
      {
        upstream_timeout_seconds: 12,
        upstream_connections: 7,
        upstream_health_check: { url: 'http://127.0.0.1:3001/health', method: 'HEAD', interval_seconds: 30 },
      },
    )
    const [plain, blank, own, off] = load(doc).servers
    // The probe's settings are inherited; its url names one server and is not: each probes its own.
    const inherited = { url: null, method: 'HEAD', intervalSeconds: 30, timeoutSeconds: 2, affectsReadiness: true }
    expect([plain.timeoutSeconds, plain.connections, plain.healthCheck]).toEqual([12, 7, inherited])
    expect([blank.timeoutSeconds, blank.connections, blank.healthCheck]).toEqual([12, 7, inherited])
    expect([own.timeoutSeconds, own.connections, own.healthCheck]).toEqual([5, 3, { ...inherited, method: 'GET', intervalSeconds: 1 }])
    expect(off.healthCheck).toBeNull()
    // Without the upstream_ keys, their own defaults.
    const bare = load(withServers({ docs: { url: DOCS } })).servers[0]
    expect([bare.timeoutSeconds, bare.connections, bare.healthCheck?.intervalSeconds]).toEqual([30, 128, 10])
    expect(load(withServers({ docs: { url: DOCS } }, { upstream_health_check: { enabled: false } })).servers[0].healthCheck).toBeNull()
  })

  test('upstream and servers together: one problem saying which to keep', () => {
    for (const upstream of ['http://127.0.0.1:3001', null]) {
      expect(problems(withServers({ docs: { url: DOCS } }, { upstream }))).toEqual([
        'upstream: and servers cannot both be set: keep upstream for one server (every path forwarded to it), or move it into servers as a named entry (reached at /mcp/<name>; default_server also serves it at /mcp)',
      ])
    }
  })

  test('neither, a blank servers, or servers: {} is refused', () => {
    const required = 'upstream: is required (the MCP server URL, e.g. http://127.0.0.1:3001), or servers to name several'
    expect(problems(REST)).toEqual([required])
    expect(problems({ ...REST, servers: null })).toEqual([required])
    expect(problems({ ...REST, upstream: null })).toEqual([required])
    expect(problems({ ...REST, servers: {} })).toEqual(['servers: must name at least one server (or remove servers and set upstream)'])
    expect(problems({ ...REST, servers: [{ url: DOCS }] })).toEqual(['servers: must be a mapping'])
  })

  test('default_server names one of servers, and only with servers', () => {
    const servers = { docs: { url: DOCS }, tickets: { url: TICKETS } }
    expect(load(withServers(servers, { default_server: 'tickets' })).defaultServer).toBe('tickets')
    expect(load(withServers(servers)).defaultServer).toBeNull()
    expect(problems(withServers(servers, { default_server: 'Docs' }))).toEqual([
      'default_server: must name one of servers (docs, tickets), not "Docs"',
    ])
    expect(problems({ ...REST, upstream: 'http://127.0.0.1:3001', default_server: 'docs' })).toEqual([
      'default_server: is only used with servers (with upstream, every path already goes to it)',
    ])
    expect(problems(withServers(servers, { default_server: '' }))).toEqual(['default_server: must not be empty'])
  })

  test('every problem of a file is reported at once', () => {
    const doc = withServers(
      {
        Docs: { url: 'http://u:p@127.0.0.1:3001/mcp?x=1', transport: 'http', headers: { Host: 'h', 'X-A': 'a\nb' } },
        tickets: { url: TICKETS, headers: { 'X-Key': 'one-long-value', 'x-key': 'two-long-value' }, connections: 0 },
      },
      { upstream: 'http://127.0.0.1:3001', default_server: 'nope' },
    )
    expect(
      problems(doc)
        .map((p) => p.split(': ')[0])
        .sort(),
    ).toEqual(
      [
        'servers.Docs',
        'servers.Docs.url',
        'servers.Docs.url',
        'servers.Docs.transport',
        'servers.Docs.headers.Host',
        'servers.Docs.headers.X-A',
        'servers.tickets.headers.x-key',
        'servers.tickets.connections',
        'upstream',
        'default_server',
      ].sort(),
    )
  })

  test('with upstream alone, the Config is as before: no servers, no default', () => {
    const config = load({ ...REST, upstream: 'http://127.0.0.1:3001/' })
    expect([config.upstream?.url, config.servers, config.defaultServer]).toEqual(['http://127.0.0.1:3001', [], null])
  })
})

describe('warnings', () => {
  test('a url with no path is most likely a base written where the endpoint goes; a /sse url with the default transport is most likely a legacy server', () => {
    const config = load(
      withServers({
        bare: { url: 'http://127.0.0.1:3001' },
        slash: { url: 'http://127.0.0.1:3002/' },
        sse: { url: 'http://127.0.0.1:3003/sse' },
        legacy: { url: 'http://127.0.0.1:3004', transport: 'sse', message_path: '/messages' },
        fine: { url: DOCS },
        fine_sse: { url: 'http://127.0.0.1:3005/sse', transport: 'sse', message_path: '/messages' },
        open_sse: { url: 'http://127.0.0.1:3006/sse', transport: 'sse' },
      }),
    )
    const warnings = configWarnings(config)
    expect(warnings).toEqual([
      expect.stringMatching(/^servers\.bare\.url http:\/\/127\.0\.0\.1:3001 has no path: .* write url: http:\/\/127\.0\.0\.1:3001\/mcp /),
      expect.stringMatching(
        /^servers\.slash\.url http:\/\/127\.0\.0\.1:3002\/ has no path: .* write url: http:\/\/127\.0\.0\.1:3002\/mcp /,
      ),
      expect.stringMatching(/^servers\.sse\.url .* ends with \/sse.* write transport: sse/),
      expect.stringMatching(/^servers\.legacy\.url .* has no path: .* write url: http:\/\/127\.0\.0\.1:3004\/sse /),
      expect.stringMatching(/^servers\.open_sse \(transport: sse\) has no message_path: .* set servers\.open_sse\.message_path /),
    ])
  })

  test('message_path: only with transport sse, and a plain absolute path', () => {
    expect(
      problems(
        withServers({
          a: { url: DOCS, message_path: '/messages' },
          b: { url: 'http://127.0.0.1:3005/sse', transport: 'sse', message_path: 'messages' },
          c: { url: 'http://127.0.0.1:3005/sse', transport: 'sse', message_path: '/a/../b' },
          d: { url: 'http://127.0.0.1:3005/sse', transport: 'sse', message_path: '/messages/' },
        }),
      ),
    ).toEqual([
      expect.stringMatching(/^servers\.a\.message_path: is only used with transport: sse/),
      expect.stringMatching(/^servers\.b\.message_path: must be a plain absolute path/),
      expect.stringMatching(/^servers\.c\.message_path: must be a plain absolute path/),
    ])
  })

  test('check-config says them on stderr and still exits 0', () => {
    const file = join(tempDir(), 'wardline.yaml')
    writeFileSync(file, yaml.dump(withServers({ docs: { url: 'http://127.0.0.1:3001' } })))
    const r = runCli(['check-config', '--config', file])
    expect(r.code).toBe(0)
    expect(r.stdout).toBe(`${file}: ok\n`)
    expect(r.stderr).toMatch(/warning: servers\.docs\.url http:\/\/127\.0\.0\.1:3001 has no path/)
  })
})

describe('secrecy of header values', () => {
  const doc = (token: string): Doc =>
    withServers({ docs: { url: DOCS, headers: { Authorization: 'Bearer ${DOCS_TOKEN}', 'X-Api-Key': token } } })
  const first = load(doc('key-one-0123456789abcdef'), { DOCS_TOKEN: 'first-token-0123456789abcdef' })
  const second = load(doc('key-two-0123456789abcdef'), { DOCS_TOKEN: 'second-token-0123456789abcdef' })
  const VALUES = ['first-token-0123456789abcdef', 'second-token-0123456789abcdef', 'key-one-0123456789abcdef', 'key-two-0123456789abcdef']

  test('a reload diff that changes them lists each key, masked, and shows no value', () => {
    const diff = diffConfigs(first, second, keysNeedingRestart(first, second))
    expect(diff.changes).toEqual([
      { key: 'servers.docs.headers.Authorization', change: 'changed', from: '***', to: '***', restart_needed: false, masked: true },
      { key: 'servers.docs.headers.X-Api-Key', change: 'changed', from: '***', to: '***', restart_needed: false, masked: true },
    ])
    // A server added or removed with its headers: its block is shown, its values masked.
    const more = load(withServers({ docs: { url: DOCS }, extra: { url: TICKETS, headers: { 'X-Api-Key': 'key-one-0123456789abcdef' } } }))
    const added = diffConfigs(first, more, keysNeedingRestart(first, more)).changes
    expect(added).toContainEqual({
      key: 'servers.extra',
      change: 'added',
      to: { url: TICKETS, headers: { 'X-Api-Key': '***' } },
      restart_needed: false,
      masked: true,
    })
    const text = JSON.stringify([diff, added, diffConfigs(more, first, []).changes])
    for (const value of VALUES) expect(text).not.toContain(value)
  })

  test('the logger is given every value, the one from ${VAR} included, and the credential after its scheme; no line shows them', () => {
    const secrets = configSecrets(first)
    expect(secrets).toEqual(
      expect.arrayContaining(['Bearer first-token-0123456789abcdef', 'first-token-0123456789abcdef', 'key-one-0123456789abcdef']),
    )
    const lines: string[] = []
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString())
        done()
      },
    })
    for (const format of ['json', 'text'] as const) {
      const log = createLogger('info', { format, tty: false, stream, secrets })
      log.warn('upstream said', { body: 'unauthorized: first-token-0123456789abcdef', header: 'Bearer first-token-0123456789abcdef' })
      log.info('key key-one-0123456789abcdef rejected')
    }
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        const text = lines.join('')
        expect(lines.length).toBe(4)
        expect(text).toContain('***')
        for (const value of VALUES) expect(text).not.toContain(value)
        resolve()
      }),
    )
  })

  test('check-config prints no value: of a valid file, of a file with problems, nor of a value it refuses', () => {
    const dir = tempDir()
    const good = join(dir, 'good.yaml')
    const bad = join(dir, 'bad.yaml')
    const literal = 'literal-token-0123456789abcdef'
    writeFileSync(good, yaml.dump(withServers({ docs: { url: DOCS, headers: { Authorization: `Bearer ${literal}` } } })))
    writeFileSync(
      bad,
      yaml.dump(
        withServers({
          docs: {
            url: DOCS,
            headers: { Authorization: `Bearer ${literal}\r\nX-Evil: 1`, Host: literal, 'x-api-key': literal, 'X-Api-Key': literal },
          },
          Tickets: { url: `http://u:${literal}@127.0.0.1:3002/mcp`, headers: { 'X-Api-Key': literal } },
        }),
      ),
    )
    const ok = runCli(['check-config', '--config', good])
    expect(ok.code).toBe(0)
    const refused = runCli(['check-config', '--config', bad])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toMatch(/5 problems/)
    for (const r of [ok, refused]) expect(r.stdout + r.stderr).not.toContain(literal)
  })
})

test('a running gateway: the values reach no error body, audit entry, metric or readiness report, even when the server is down', async () => {
  const value = 'Bearer gateway-held-credential-0123456789'
  const dead = 'http://127.0.0.1:9/mcp' // the discard port: nothing listens there
  const g = await startServersHarness({
    up: { headers: { Authorization: value, 'X-Api-Key': 'api-key-0123456789abcdef' } },
    down: { url: dead, headers: { Authorization: value, 'X-Api-Key': 'api-key-0123456789abcdef' } },
  })
  try {
    const seen: string[] = []
    for (const path of ['/mcp/up', '/mcp/down', '/mcp/nope']) {
      const res = await fetch(`${g.url}${path}`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, ...as('alice') },
        body: JSON.stringify(
          rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }),
        ),
      })
      seen.push(`${res.status} ${JSON.stringify([...res.headers])} ${await res.text()}`)
    }
    expect(seen.map((s) => s.slice(0, 3))).toEqual(['200', '502', '404'])
    for (const path of ['/metrics', '/readyz']) seen.push(await (await fetch(`${g.url}${path}`)).text())
    const audit = await g.audit()
    seen.push(JSON.stringify(audit))
    // What was read is the whole story: the 502's entry and its reason are there, the metrics too.
    expect(audit.map((e) => e.status).sort()).toEqual([200, 404, 502])
    expect(seen.join('\n')).toContain('wardline_')
    for (const secret of ['gateway-held-credential', 'api-key-0123456789abcdef']) expect(seen.join('\n')).not.toContain(secret)
  } finally {
    await g.close()
  }
})

describe('reload', () => {
  const servers = (docs: Doc = {}): Doc =>
    withServers({ docs: { url: DOCS, ...docs }, tickets: { url: TICKETS } }, { default_server: 'docs' })

  test('servers and default_server are applied by a reload: no restart needed', () => {
    const before = load(servers())
    const after = load({
      ...servers({ timeout_seconds: 3, headers: { 'X-Api-Key': 'key-one-0123456789abcdef' } }),
      default_server: 'tickets',
    })
    expect(keysNeedingRestart(before, after)).toEqual([])
    expect(enforcementLost(before, after)).toEqual([])
    const removed = load(withServers({ docs: { url: DOCS } }))
    expect(keysNeedingRestart(before, removed)).toEqual([])
    expect(enforcementLost(before, removed)).toEqual([])
  })

  test('moving between upstream: and servers: is refused, saying a restart applies it', () => {
    const one = load({ ...REST, upstream: 'http://127.0.0.1:3001' })
    const several = load(servers())
    for (const [from, to, now, file] of [
      [one, several, 'upstream:', 'servers:'],
      [several, one, 'servers:', 'upstream:'],
    ] as const) {
      expect(enforcementLost(from, to)).toEqual([
        `upstream: the running gateway serves ${now} and the file sets ${file} instead: moving between the two needs a restart (routes, budgets and policy change shape together), so nothing of the file was applied. Restart to apply it`,
      ])
      expect(keysNeedingRestart(from, to)).toContain('upstream')
    }
  })

  test('a file cut short that loses the servers block, with no upstream, is invalid: nothing to reload', () => {
    const text = yaml.dump(servers())
    const cut = text.slice(0, text.indexOf('servers:'))
    expect(configProblems(cut)).toEqual([
      'upstream: is required (the MCP server URL, e.g. http://127.0.0.1:3001), or servers to name several',
    ])
    // Cut after `servers:` or inside a server: still invalid.
    expect(configProblems(`${cut}servers:\n`)).toEqual([expect.stringMatching(/^upstream: is required/)])
    expect(configProblems(`${cut}servers:\n  docs:\n`)).toEqual([expect.stringMatching(/^servers\.docs\.url: is required/)])
  })

  test('a running gateway: a switch to upstream: changes nothing; a servers change applies', async () => {
    const h = await startServersHarness({ docs: {}, tickets: {} })
    try {
      const initialize = async (path: string): Promise<number> => {
        const res = await fetch(`${h.url}${path}`, {
          method: 'POST',
          headers: { ...MCP_HEADERS, ...as('alice') },
          body: JSON.stringify(
            rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }),
          ),
        })
        await res.arrayBuffer()
        return res.status
      }
      expect([await initialize('/mcp/docs'), await initialize('/mcp/tickets'), await initialize('/mcp')]).toEqual([200, 200, 404])
      const dir = dirname(h.auditFile) // the same file's directory: relative paths read the same
      const switched = configFrom({ ...h.tree, servers: undefined, upstream: h.upstreams.docs.url }, {}, dir)
      expect(() => h.gateway.reload(switched)).toThrow(/upstream: the running gateway serves servers: and the file sets upstream: instead/)
      expect([await initialize('/mcp/docs'), await initialize('/mcp/tickets'), await initialize('/mcp')]).toEqual([200, 200, 404])
      // The same file with a default and one server fewer: applied at once.
      const tree = h.tree as { servers: Record<string, Doc> }
      const next = configFrom({ ...h.tree, servers: { docs: tree.servers.docs }, default_server: 'docs' }, {}, dir)
      expect(h.gateway.reload(next)).toEqual([])
      expect([await initialize('/mcp/docs'), await initialize('/mcp/tickets'), await initialize('/mcp')]).toEqual([200, 404, 200])
    } finally {
      await h.close()
    }
  })
})

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}
