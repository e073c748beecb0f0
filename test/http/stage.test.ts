/**
 * The http stage on its own: which Host and Origin values pass, what a refusal says, and the preflight
 * answer it builds. test/e2e/origin.test.ts checks the same through a running gateway.
 */
import { httpStage } from '../../src/http/stage'
import type { HttpConfig } from '../../src/config/types'
import { CONTINUE, type Refusal, type Verdict } from '../../src/pipeline/stage'
import { exchangeWithHeaders as exchange } from '../helpers/exchange'
import { configFrom } from '../helpers/harness'

function http(tree: Record<string, unknown>): HttpConfig {
  return configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'header' }, audit: { output: 'stdout' }, ...tree }).http
}

function refusal(verdict: Verdict): Refusal {
  if (verdict === CONTINUE) throw new Error('expected a refusal, got CONTINUE')
  return verdict
}

describe('Host', () => {
  const stage = httpStage(http({ allowed_hosts: ['127.0.0.1', 'LocalHost:8080', '[::1]', '[0:0:0:0:0:0:0:2]:9000', 'mcp.example.com'] }))
  const run = (...headers: Array<[string, string]>): Verdict => stage.run(exchange('POST', headers)) as Verdict

  test.each([
    ['127.0.0.1:3000', 'an entry without a port accepts any port'],
    ['127.0.0.1', 'and no port'],
    ['localhost:8080', 'an entry with a port accepts that port (case-insensitive)'],
    ['LOCALHOST:8080', 'whatever the case the client used'],
    ['[::1]:8080', 'an IPv6 literal in brackets, any port'],
    ['[::2]:9000', 'an IPv6 entry is compared in its shortest form, as browsers send it'],
    ['mcp.example.com', 'a name'],
  ])('Host %s is accepted: %s', (host) => {
    expect(run(['Host', host])).toBe(CONTINUE)
  })

  test.each([
    'localhost:8081',
    'localhost',
    'evil.example',
    'evil.example:8080',
    '127.0.0.1.evil.example',
    '[::2]:9001',
    'mcp.example.com.',
    '127.0.0.1:abc',
    '127.0.0.1:',
    '[::1]:x',
  ])('Host %s is refused with 403', (host) => {
    expect(refusal(run(['Host', host]))).toMatchObject({
      status: 403,
      decision: 'error',
      reason: `host ${host} not in allowed_hosts`,
      message: 'Forbidden: host not allowed',
    })
  })

  test('a request without Host is refused; one with two is a 400 whichever comes first', () => {
    expect(refusal(run())).toMatchObject({ status: 403, reason: 'no host header (allowed_hosts is set)' })
    expect(refusal(run(['Host', '127.0.0.1'], ['host', 'evil.example']))).toMatchObject({
      status: 400,
      reason: 'more than one host header',
    })
  })

  test('with allowed_hosts empty any Host passes', () => {
    expect(httpStage(http({})).run(exchange('POST', [['Host', 'evil.example']]))).toBe(CONTINUE)
  })
})

describe('Origin', () => {
  const stage = httpStage(http({ allowed_origins: ['http://localhost:6274', 'null'] }))

  test('no Origin: nothing to check, no CORS', () => {
    const ex = exchange('POST', [['Host', 'x']])
    expect(stage.run(ex)).toBe(CONTINUE)
    expect(ex.corsOrigin).toBeNull()
  })

  test('a listed origin passes and is recorded as sent, whatever its case', () => {
    const ex = exchange('POST', [['Origin', 'http://LocalHost:6274']])
    expect(stage.run(ex)).toBe(CONTINUE)
    expect(ex.corsOrigin).toBe('http://LocalHost:6274')
  })

  test.each(['http://localhost:6275', 'https://localhost:6274', 'http://evil.example', 'http://localhost:6274, http://evil.example'])(
    'Origin %s is refused with 403',
    (origin) => {
      const ex = exchange('POST', [['Origin', origin]])
      expect(refusal(stage.run(ex) as Verdict)).toMatchObject({
        status: 403,
        decision: 'error',
        reason: `origin ${origin} not in allowed_origins`,
        message: 'Forbidden: origin not allowed',
      })
      expect(ex.corsOrigin).toBeNull()
    },
  )

  test('with the default empty list on a loopback listener, loopback origins pass (any port) and every other is refused', () => {
    const loopback = httpStage(http({})) // listen defaults to 127.0.0.1:8080
    const run = (origin: string, host = '127.0.0.1:8080'): Verdict =>
      loopback.run(
        exchange('POST', [
          ['Host', host],
          ['Origin', origin],
        ]),
      ) as Verdict
    for (const origin of [
      'http://localhost:6274',
      'http://127.0.0.1:3000',
      'https://[::1]:443',
      'HTTP://LOCALHOST',
      'http://localhost:6277',
    ]) {
      expect(run(origin)).toBe(CONTINUE)
    }
    for (const origin of [
      'null',
      'http://evil.example',
      'http://localhost.evil.example',
      'http://127.0.0.2:80',
      'file://',
      'ws://localhost:1',
    ]) {
      expect(refusal(run(origin))).toMatchObject({ status: 403, reason: `origin ${origin} not in allowed_origins` })
    }
    // The same list on a listener other hosts reach: a loopback origin is no longer this machine's page.
    expect(
      refusal(httpStage(http({ listen: '0.0.0.0:8080' })).run(exchange('POST', [['Origin', 'http://localhost:6274']])) as Verdict).status,
    ).toBe(403)
    // A listed set replaces the loopback default.
    expect(
      refusal(
        stage.run(
          exchange('POST', [
            ['Host', 'localhost:1'],
            ['Origin', 'http://localhost:6275'],
          ]),
        ) as Verdict,
      ).status,
    ).toBe(403)
    expect(stage.run(exchange('GET', [['Origin', 'null']]))).toBe(CONTINUE)
  })

  test("a request's own origin passes when its Host is vouched for (allowed_hosts, or a loopback name), whatever the listener", () => {
    const open = httpStage(http({ listen: '0.0.0.0:8080' }))
    const run = (s: ReturnType<typeof httpStage>, host: string, origin: string): Verdict =>
      s.run(
        exchange('POST', [
          ['Host', host],
          ['Origin', origin],
        ]),
      ) as Verdict
    expect(run(open, '127.0.0.1:8080', 'http://127.0.0.1:8080')).toBe(CONTINUE)
    expect(run(open, 'LocalHost:8080', 'http://localhost:8080')).toBe(CONTINUE)
    expect(run(open, '[::1]:8080', 'http://[::1]:8080')).toBe(CONTINUE)
    // A DNS-rebinding page is same-origin with its own Host: without allowed_hosts it is refused.
    expect(refusal(run(open, 'evil.example:8080', 'http://evil.example:8080')).status).toBe(403)
    expect(refusal(run(open, '127.0.0.1:8080', 'http://127.0.0.1:8081')).status).toBe(403)
    expect(refusal(run(open, '127.0.0.1:8080', 'https://127.0.0.1:8080')).status).toBe(403) // not how this listener was reached
    const named = httpStage(http({ listen: '0.0.0.0:8080', allowed_hosts: ['mcp.example.com'] }))
    expect(run(named, 'mcp.example.com:8080', 'http://mcp.example.com:8080')).toBe(CONTINUE)
    expect(refusal(run(named, 'evil.example:8080', 'http://evil.example:8080'))).toMatchObject({
      status: 403,
      reason: 'host evil.example:8080 not in allowed_hosts',
    })
  })

  test('an over-long value is cut short in the audit reason', () => {
    const origin = `http://${'a'.repeat(5000)}.example`
    expect(refusal(stage.run(exchange('GET', [['Origin', origin]])) as Verdict).reason.length).toBeLessThan(300)
  })
})

describe('a CORS preflight', () => {
  const stage = httpStage(http({ allowed_origins: ['http://localhost:6274'] }))
  const preflight = (headers: Array<[string, string]>): Verdict =>
    stage.run(exchange('OPTIONS', [['Origin', 'http://localhost:6274'], ['Access-Control-Request-Method', 'POST'], ...headers])) as Verdict

  test('from a listed origin is answered with a bodyless 204 allowing the MCP methods and the requested headers', () => {
    const answer = refusal(
      preflight([['Access-Control-Request-Headers', 'authorization,content-type,mcp-protocol-version,mcp-param-region']]),
    )
    expect(answer).toMatchObject({ status: 204, decision: 'passthrough', noBody: true, reason: 'CORS preflight answered by the gateway' })
    expect(answer.headers).toEqual({
      'access-control-allow-methods': 'GET, POST, DELETE, OPTIONS',
      'access-control-allow-headers': 'authorization, content-type, mcp-protocol-version, mcp-param-region',
      'access-control-max-age': '600',
    })
  })

  test('asking for a header off the list gets no Access-Control-Allow-Headers at all, and the audit says which', () => {
    const answer = refusal(preflight([['Access-Control-Request-Headers', 'content-type, x-evil']]))
    expect(answer.status).toBe(204)
    expect(answer.headers?.['access-control-allow-headers']).toBeUndefined()
    expect(answer.reason).toContain('request header x-evil not allowed')
  })

  test('asking for no header gets the bare answer', () => {
    expect(refusal(preflight([])).headers).toEqual({
      'access-control-allow-methods': 'GET, POST, DELETE, OPTIONS',
      'access-control-max-age': '600',
    })
  })

  test('without Origin it is no browser preflight: it goes on (to authentication)', () => {
    expect(stage.run(exchange('OPTIONS', [['Access-Control-Request-Method', 'POST']]))).toBe(CONTINUE)
  })

  test('an OPTIONS from a listed origin that is not a preflight goes on', () => {
    expect(stage.run(exchange('OPTIONS', [['Origin', 'http://localhost:6274']]))).toBe(CONTINUE)
  })
})
