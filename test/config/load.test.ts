import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseConfig } from '../../src/config/load'
import { configProblems } from '../helpers/harness'

function problems(text: string, env: NodeJS.ProcessEnv = {}): string[] {
  return configProblems(text, '/srv', env)
}

describe('configuration loading', () => {
  test('a minimal file gets every documented default', () => {
    const config = parseConfig('upstream: http://127.0.0.1:3001/\nauth: { mode: header }\n', { env: {}, baseDir: '/srv' })
    expect(config.listen).toEqual({ host: '127.0.0.1', port: 8080 })
    expect(config.upstream).toEqual({
      url: 'http://127.0.0.1:3001',
      timeoutSeconds: 30,
      connections: 128,
      healthCheck: { url: null, method: 'GET', intervalSeconds: 10, timeoutSeconds: 2, affectsReadiness: true },
    })
    expect(config.limits).toEqual({
      maxBodyBytes: 4194304,
      maxJsonDepth: 64,
      maxBatchMessages: 100,
      maxConcurrentPerIdentity: 64,
      requestTimeoutSeconds: 300,
      sessionIdleSeconds: 86400,
      maxSessions: 100000,
      maxSessionsPerIdentity: 1000,
    })
    expect(config.http).toEqual({ allowedOrigins: [], loopbackOrigins: true, allowedHosts: [], trustedProxies: [] })
    expect(config.features).toEqual({ budgetEnforcement: false, postgresStorage: false })
    expect(config.audit.output).toBe('stdout')
    expect(Object.isFrozen(config.upstream)).toBe(true)
  })

  test('every problem is reported at once, each with its key path', () => {
    const found = problems(
      [
        'listen: nowhere',
        'upstream: ftp://example.com',
        'upstream_timeout_seconds: -1',
        'max_body_bytes: 1.5',
        'features: { budget_enforcement: yes, teleport: true }',
        'audit: { output: "" }',
        'colour: blue',
        'auth: { mode: header }',
      ].join('\n'),
    )
    expect(found).toEqual(
      expect.arrayContaining([
        'listen: must be host:port (e.g. 0.0.0.0:8080)',
        'upstream: must use http or https',
        'upstream_timeout_seconds: must be greater than 0 and at most 3600',
        'max_body_bytes: must be a whole number',
        'features.teleport: unknown key (allowed: budget_enforcement, postgres_storage)',
        'features.budget_enforcement: must be true or false',
        'audit.output: must not be empty',
        expect.stringMatching(/^colour: unknown key/),
      ]),
    )
    expect(found).toHaveLength(8)
  })

  test('origins, hosts and proxies are checked one by one and kept lower-cased', () => {
    const base = 'upstream: http://127.0.0.1:3001\nauth: { mode: header }\n'
    const config = parseConfig(
      `${base}allowed_origins: [HTTP://LocalHost:6274, "null"]\nallowed_hosts: [Example.com, "127.0.0.1:8080", "[::1]:8080"]\ntrusted_proxies: [10.0.0.0/8, "::1"]\n`,
      { env: {}, baseDir: '/srv' },
    )
    expect(config.http).toEqual({
      allowedOrigins: ['http://localhost:6274', 'null'],
      loopbackOrigins: false,
      allowedHosts: ['example.com', '127.0.0.1:8080', '[::1]:8080'],
      trustedProxies: ['10.0.0.0/8', '::1'],
    })
    expect(
      problems(
        `${base}allowed_origins: [https://a.example/, "https://b.example:443", "*", "x"]\nallowed_hosts: ["a b", "h:70000"]\ntrusted_proxies: [10.0.0.0/33, nope]\nmax_json_depth: 3\nmax_batch_messages: 0\nmax_concurrent_per_identity: 1.5\n`,
      ),
    ).toEqual([
      'max_json_depth: must be between 4 and 1000',
      'max_batch_messages: must be between 1 and 10000',
      'max_concurrent_per_identity: must be a whole number',
      expect.stringMatching(/^allowed_origins\[0\]: must be an origin .*"https:\/\/a.example\/"/),
      expect.stringMatching(/^allowed_origins\[1\]: must be an origin/),
      expect.stringMatching(/^allowed_origins\[2\]: must be an origin/),
      expect.stringMatching(/^allowed_origins\[3\]: must be an origin/),
      expect.stringMatching(/^allowed_hosts\[0\]: must be a host name/),
      expect.stringMatching(/^allowed_hosts\[1\]: must be a host name/),
      expect.stringMatching(/^trusted_proxies\[0\]: must be an IP address or a CIDR block/),
      expect.stringMatching(/^trusted_proxies\[1\]: must be an IP address or a CIDR block/),
    ])
  })

  test('${VAR} and ${VAR:-default} come from the environment; a missing one is named', () => {
    const text = 'upstream: ${UP}\nlisten: ${LISTEN:-0.0.0.0:9000}\nauth: { mode: header }\naudit: { output: "${AUDIT_PATH}" }\n'
    const config = parseConfig(text, { env: { UP: 'http://mcp:3001', AUDIT_PATH: 'logs/a.jsonl' }, baseDir: '/srv' })
    expect(config.upstream!.url).toBe('http://mcp:3001')
    expect(config.listen).toEqual({ host: '0.0.0.0', port: 9000 })
    expect(config.audit.output).toBe('/srv/logs/a.jsonl')
    expect(problems(text, { UP: 'http://mcp:3001' })).toEqual(['audit.output: environment variable AUDIT_PATH is not set'])
    expect(problems(text, { UP: 'http://mcp:3001', AUDIT_PATH: '' })).toEqual([
      'audit.output: environment variable AUDIT_PATH is set but empty',
    ])
  })

  test('a __proto__ key is an ordinary key: unknown at the top level, a name like any other in a map', () => {
    expect(problems('upstream: http://127.0.0.1:3001\nauth: { mode: header }\n__proto__: { bogus: 1 }\n')).toEqual([
      expect.stringMatching(/^__proto__: unknown key \(allowed: listen, /),
    ])
    const config = parseConfig(
      'upstream: http://127.0.0.1:3001\nauth: { mode: header }\nfeatures: { budget_enforcement: true }\nbudget: { requests_per_window: 5, tenants: { __proto__: { requests_per_window: 1 } } }\n',
      { env: {}, baseDir: '/srv' },
    )
    expect(Object.keys(config.budget?.tenants ?? {})).toEqual(['__proto__'])
    expect(Object.getOwnPropertyDescriptor(config.budget?.tenants, '__proto__')?.value).toMatchObject([{ requestsPerWindow: 1 }])
  })

  test('malformed YAML is one clear problem', () => {
    expect(problems('upstream: [unclosed')).toEqual([expect.stringMatching(/^not valid YAML: /)])
  })

  test('a missing upstream is required', () => {
    expect(problems('auth: { mode: header }')).toEqual([
      'upstream: is required (the MCP server URL, e.g. http://127.0.0.1:3001), or servers to name several',
    ])
  })

  test('an upstream with a query, a fragment or credentials is refused rather than silently trimmed', () => {
    for (const url of ['http://mcp:3001/?tenant=a', 'http://mcp:3001/#x', 'http://user:pw@mcp:3001']) {
      expect(problems(`upstream: "${url}"\nauth: { mode: header }\n`)).toEqual([
        'upstream: must not have a query, a fragment or credentials (only scheme, host, port and a base path are used)',
      ])
    }
  })

  test('the shipped Postgres example, read without its environment, names exactly the missing variables', () => {
    const text = readFileSync(join(__dirname, '..', '..', 'examples', 'wardline.postgres.yaml'), 'utf8')
    expect(problems(text).sort()).toEqual([
      'auth.jwt.secret: environment variable WARDLINE_JWT_SECRET is not set',
      'postgres.dsn: environment variable WARDLINE_POSTGRES_DSN is not set',
    ])
  })

  test('an unset secret variable is reported once, without unrelated algorithm complaints', () => {
    const text = 'upstream: http://127.0.0.1:3001\nauth:\n  jwt:\n    secret: ${WARDLINE_JWT_SECRET}\n    algorithms: [HS512]\n'
    expect(problems(text)).toEqual(['auth.jwt.secret: environment variable WARDLINE_JWT_SECRET is not set'])
  })
})
