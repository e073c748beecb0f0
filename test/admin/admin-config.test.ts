import { keysNeedingRestart } from '../../src/config/restart-keys'
import { silentLogger } from '../../src/log'
import { startGateway } from '../../src/server/compose'
import { occupiedPort } from '../helpers/cli'
import { type Harness, configFrom, configProblems, startHarness } from '../helpers/harness'

const TOKEN = 'a'.repeat(32)
const BASE = `listen: 127.0.0.1:8080\nupstream: http://127.0.0.1:3001\nauth: {mode: header}\n`

describe('the admin: block', () => {
  test('absent, or without listen, means no admin listener', () => {
    expect(configFrom({ upstream: 'http://127.0.0.1:3001', auth: { mode: 'header' } }).admin).toBeNull()
    expect(configFrom({ upstream: 'http://127.0.0.1:3001', auth: { mode: 'header' }, admin: null }).admin).toBeNull()
  })

  test('listen and a token from the environment', () => {
    const config = configFrom(
      { upstream: 'http://127.0.0.1:3001', auth: { mode: 'header' }, admin: { listen: '[::1]:9090', token: '${T}' } },
      { T: TOKEN },
    )
    expect(config.admin).toEqual({ listen: { host: '::1', port: 9090 }, token: TOKEN, tls: null })
  })

  test.each([
    [`admin: {listen: 127.0.0.1:9090}`, 'admin.token: is required when admin.listen is set (e.g. token: ${WARDLINE_ADMIN_TOKEN})'],
    [`admin: {token: ${TOKEN}}`, 'admin.listen: is required when admin.token is set (remove the admin: block to keep the admin API off)'],
    [
      `admin: {listen: 127.0.0.1:9090, token: short-secret-value}`,
      'admin.token: must be at least 32 bytes (its value is not shown; openssl rand -hex 32 makes one)',
    ],
    [`admin: {listen: 9090, token: ${TOKEN}}`, 'admin.listen: must be a string'],
    [
      `admin: {listen: localhost, token: ${TOKEN}}`,
      'admin.listen: must be host:port with a port between 0 and 65535 (e.g. 127.0.0.1:9090)',
    ],
    [
      `admin: {listen: '127.0.0.1:70000', token: ${TOKEN}}`,
      'admin.listen: must be host:port with a port between 0 and 65535 (e.g. 127.0.0.1:9090)',
    ],
    [
      `admin: {listen: 127.0.0.1:8080, token: ${TOKEN}}`,
      'admin.listen: must differ from listen (127.0.0.1:8080): the admin API needs its own listener',
    ],
    [
      `admin: {listen: 0.0.0.0:8080, token: ${TOKEN}}`,
      'admin.listen: must differ from listen (127.0.0.1:8080): the admin API needs its own listener',
    ],
    [`admin: {listen: 127.0.0.1:9090, token: ${TOKEN}, tls: true}`, 'admin.tls: must be a mapping'],
    [
      `admin: {listen: 127.0.0.1:9090, token: ${TOKEN}, tls: {cert_file: a.pem}}`,
      'admin.tls.key_file: is required in admin.tls (the PEM private key of the certificate)',
    ],
    [
      `admin: {listen: 127.0.0.1:9090, token: ${TOKEN}, tls: {cert_file: a.pem, key_file: b.pem, ca_file: c.pem}}`,
      'admin.tls.ca_file: unknown key (allowed: cert_file, key_file)',
    ],
    [`admin: {listen: 127.0.0.1:9090, token: ${TOKEN}, ssl: true}`, 'admin.ssl: unknown key (allowed: listen, token, tls)'],
    [`admin: {listen: 127.0.0.1:9090, token: '\${ADMIN_T}'}`, 'admin.token: environment variable ADMIN_T is not set'],
  ])('%s is refused: %s', (block, problem) => {
    expect(configProblems(`${BASE}${block}\n`)).toEqual([problem])
  })

  test('a short token is refused without echoing it', () => {
    const problems = configProblems(`${BASE}admin: {listen: 127.0.0.1:9090, token: 'hunter2-hunter2'}\n`)
    expect(problems.join('\n')).not.toContain('hunter2')
  })

  test('another port on the same host, or port 0 beside port 0, is fine', () => {
    expect(configProblems(`${BASE}admin: {listen: 127.0.0.1:9090, token: ${TOKEN}}\n`)).toEqual([])
    expect(
      configProblems(
        `listen: 127.0.0.1:0\nupstream: http://127.0.0.1:3001\nauth: {mode: header}\nadmin: {listen: 127.0.0.1:0, token: ${TOKEN}}\n`,
      ),
    ).toEqual([])
  })

  test('admin is a restart key', () => {
    const tree = { upstream: 'http://127.0.0.1:3001', auth: { mode: 'header' } }
    const before = configFrom({ ...tree, admin: { listen: '127.0.0.1:9090', token: TOKEN } })
    const after = configFrom({ ...tree, admin: { listen: '127.0.0.1:9091', token: TOKEN } })
    expect(keysNeedingRestart(before, after)).toEqual(['admin'])
  })
})

describe('the admin listener', () => {
  test('a busy admin port stops startup with an error naming admin.listen', async () => {
    const { port, release } = await occupiedPort()
    try {
      const config = configFrom({
        listen: '127.0.0.1:0',
        upstream: 'http://127.0.0.1:1',
        auth: { mode: 'header' },
        admin: { listen: `127.0.0.1:${port}`, token: TOKEN },
      })
      // The same words as the main listener's (net/listen.ts), with the key to change.
      const failure = await startGateway(config, { log: silentLogger() }).then(
        () => null,
        (err: unknown) => err,
      )
      expect(failure).toMatchObject({ code: 'WL_LISTEN_FAILED' })
      expect((failure as Error).message).toContain(
        `admin.listen 127.0.0.1:${port} is already in use (another process listens there): change admin.listen`,
      )
    } finally {
      await release()
    }
  })

  describe('with budgets off', () => {
    let h: Harness
    beforeAll(async () => (h = await startHarness({ config: { admin: { listen: '127.0.0.1:0', token: TOKEN } } })))
    afterAll(() => h.close())

    test('GET /budgets answers 409 saying why, revocations still work', async () => {
      const res = await fetch(`${h.gateway.adminUrl}/budgets?identity=alice`, { headers: { authorization: `Bearer ${TOKEN}` } })
      expect(res.status).toBe(409)
      expect(await res.json()).toEqual({
        error: 'budgets are not enforced (features.budget_enforcement is false): there are no buckets to show or reset',
      })
      const list = await fetch(`${h.gateway.adminUrl}/revocations`, { headers: { authorization: `Bearer ${TOKEN}` } })
      expect(list.status).toBe(200)
    })

    test('shutdown closes the admin listener', async () => {
      const url = h.gateway.adminUrl as string
      await h.close()
      await expect(fetch(`${url}/revocations`, { headers: { authorization: `Bearer ${TOKEN}` } })).rejects.toThrow()
      h = await startHarness() // for afterAll
    })
  })

  test('without an admin: block there is no admin listener', async () => {
    const h = await startHarness()
    try {
      expect(h.gateway.adminUrl).toBeNull()
    } finally {
      await h.close()
    }
  })
})
