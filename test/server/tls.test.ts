/**
 * TLS on the gateway's listeners (tls, admin.tls): real certificates made by openssl for each run
 * (test/helpers/certificates.ts), the official MCP SDK client over https, protocol floor, plain HTTP on
 * the TLS port, certificates replaced without dropping a connection, and client certificates.
 */
import { X509Certificate } from 'node:crypto'
import { copyFileSync, writeFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { Agent, type RequestOptions, request } from 'node:https'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { type AddressInfo, connect as netConnect } from 'node:net'
import { type ConnectionOptions, type TLSSocket, connect, createServer as createTlsServer } from 'node:tls'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Agent as UndiciAgent, fetch as undiciFetch } from 'undici'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { callAdmin } from '../../src/admin/client'
import { keysNeedingRestart } from '../../src/config/restart-keys'
import { createLogger, silentLogger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { type IssuedCertificate, type TestCa, makeTestCa } from '../helpers/certificates'
import { as, configFrom, configProblems, tempDir } from '../helpers/harness'

const ADMIN_TOKEN = 'a'.repeat(64)

/** One https request on `agent`: status, body, the certificate the server presented, and whether the socket was reused. */
function get(
  url: string,
  options: RequestOptions = {},
): Promise<{ status: number; body: string; fingerprint: string; reused: boolean; localPort: number }> {
  return new Promise((resolve, reject) => {
    const req = request(url, options, (res) => {
      // Read now: a kept-alive socket leaves the response for the agent's pool once it has ended.
      const socket = res.socket as TLSSocket
      const fingerprint = socket.getPeerCertificate().fingerprint256
      const localPort = socket.localPort ?? 0
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (body += c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, fingerprint, reused: req.reusedSocket, localPort }))
    })
    req.on('error', reject)
    req.end()
  })
}

/** A bare TLS handshake offering at most `maxVersion`; resolves with the version agreed. */
function handshake(port: number, maxVersion: ConnectionOptions['maxVersion']): Promise<string> {
  return new Promise((resolve, reject) => {
    // SECLEVEL=0: OpenSSL 3 refuses to offer TLS 1.1 at all otherwise; the refusal must be the server's.
    const socket = connect({ port, host: '127.0.0.1', ca: ca.certPem, minVersion: 'TLSv1', maxVersion, ciphers: 'DEFAULT@SECLEVEL=0' })
    socket.once('secureConnect', () => {
      const version = socket.getProtocol() ?? ''
      socket.end()
      resolve(version)
    })
    socket.once('error', reject)
  })
}

function fingerprintOf(pem: string): string {
  return new X509Certificate(pem).fingerprint256
}

/** A logger whose JSON lines the test reads back. */
function capturedLogger(): { log: ReturnType<typeof createLogger>; records: () => Array<Record<string, unknown>> } {
  const stream = new PassThrough()
  let text = ''
  stream.on('data', (c: Buffer) => (text += c.toString('utf8')))
  const log = createLogger('info', { format: 'json', stream })
  return {
    log,
    records: () =>
      text
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  }
}

let dir: string
let ca: TestCa
let server: IssuedCertificate
let upstream: ExampleServer

beforeAll(async () => {
  dir = tempDir('wardline-tls-')
  ca = makeTestCa(dir)
  server = ca.issue('server')
  upstream = await startExampleServer({ mode: 'stateful' })
})
afterAll(() => upstream.close())

function tree(extra: Record<string, unknown> = {}): Record<string, unknown> {
  const t: Record<string, unknown> = {
    listen: '127.0.0.1:0',
    upstream: upstream.url,
    auth: { mode: 'header' },
    audit: { output: join(dir, `audit-${Math.random().toString(36).slice(2)}.jsonl`) },
    tls: { cert_file: server.certFile, key_file: server.keyFile },
    ...extra,
  }
  for (const key of Object.keys(t)) if (t[key] === undefined) delete t[key]
  return t
}

describe('the main listener over TLS', () => {
  let gateway: RunningGateway
  beforeAll(async () => {
    gateway = await startGateway(configFrom(tree()), { log: silentLogger() })
  })
  afterAll(() => gateway.shutdown())

  test('startGateway answers an https:// URL', () => {
    expect(gateway.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)
  })

  test('the official MCP SDK client connects, lists and calls through it with the test CA trusted, and the upstream is told https', async () => {
    const dispatcher = new UndiciAgent({ connect: { ca: ca.certPem } })
    const transport = new StreamableHTTPClientTransport(new URL(`${gateway.url}/mcp`), {
      requestInit: { headers: as('alice', 'acme') },
      fetch: ((input: string | URL, init?: RequestInit) =>
        undiciFetch(input, { ...(init as object), dispatcher })) as unknown as typeof fetch,
    })
    const client = new Client({ name: 'tls-e2e', version: '1.0.0' })
    await client.connect(transport)
    const tools = await client.listTools()
    expect(tools.tools.map((t) => t.name)).toContain('echo')
    const result = (await client.callTool({ name: 'echo', arguments: { text: 'over tls' } })) as { content: Array<{ text: string }> }
    expect(result.content[0].text).toBe('over tls')
    await client.close()
    await dispatcher.close()
    const call = upstream.seen.filter((s) => s.method === 'POST').at(-1)
    expect(call?.headers['x-forwarded-proto']).toBe('https')
  })

  test('a client that does not trust the certificate is refused by its own TLS check (nothing weaker is offered)', async () => {
    await expect(get(`${gateway.url}/healthz`, { agent: false })).rejects.toMatchObject({ code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' })
  })

  test('TLS 1.1 is refused, while the same client gets in where 1.1 is allowed and where it may offer 1.2', async () => {
    const port = Number(new URL(gateway.url).port)
    const lenient = createTlsServer(
      {
        cert: server.certPem,
        key: server.keyPem,
        minVersion: 'TLSv1',
        ciphers: 'DEFAULT@SECLEVEL=0',
      },
      (s) => s.end(),
    )
    await new Promise<void>((resolve) => lenient.listen(0, '127.0.0.1', resolve))
    try {
      const lenientPort = (lenient.address() as AddressInfo).port
      expect(await handshake(lenientPort, 'TLSv1.1')).toBe('TLSv1.1')
      await expect(handshake(port, 'TLSv1.1')).rejects.toThrow(/protocol version|unsupported protocol|alert/i)
      expect(await handshake(port, 'TLSv1.2')).toBe('TLSv1.2')
    } finally {
      lenient.close()
    }
  })

  test('a peer that connects and never completes a handshake is cut off after 10 s, and others are served meanwhile', async () => {
    const started = Date.now()
    const socket = netConnect(Number(new URL(gateway.url).port), '127.0.0.1')
    socket.write(Buffer.from([0x16, 0x03, 0x01])) // the first bytes of a ClientHello, then silence
    const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now() - started)))
    socket.on('error', () => undefined)
    expect((await get(`${gateway.url}/healthz`, { ca: ca.certPem, agent: false })).status).toBe(200)
    const after = await closed
    expect(after).toBeGreaterThanOrEqual(9_500)
    expect(after).toBeLessThan(13_000) // Node's own default would have been 120 s
  }, 20_000)

  test('plain HTTP on the TLS port gets its connection closed, and the gateway keeps serving https', async () => {
    const failed = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      const req = httpRequest(`${gateway.url.replace('https:', 'http:')}/healthz`, { agent: false }, () => resolve(null))
      req.on('error', resolve)
      req.end()
    })
    // No HTTP answer at all: the TLS server takes the request line for a bad handshake and closes.
    expect(failed?.code).toMatch(/^(ECONNRESET|EPIPE)$/)
    const ok = await get(`${gateway.url}/healthz`, { ca: ca.certPem, agent: false })
    expect(ok).toMatchObject({ status: 200, body: '{"status":"ok"}' })
  })
})

test("over TLS a page's own origin is https:// + its Host, and http:// + the same Host is a foreign origin", async () => {
  const gateway = await startGateway(configFrom(tree({ allowed_hosts: ['wardline.test'], allowed_origins: ['https://console.example'] })), {
    log: silentLogger(),
  })
  try {
    const host = `wardline.test:${new URL(gateway.url).port}`
    const call = (origin: string): ReturnType<typeof get> =>
      get(`${gateway.url}/mcp`, {
        ca: ca.certPem,
        agent: false,
        servername: 'localhost',
        headers: { host, origin, ...as('alice', 'acme') },
      })
    expect((await call(`https://${host}`)).status).not.toBe(403)
    expect(await call(`http://${host}`)).toMatchObject({ status: 403, body: expect.stringContaining('origin not allowed') as unknown })
  } finally {
    await gateway.shutdown()
  }
})

describe('certificates replaced while serving', () => {
  test('after reloadCertificates a kept-alive connection keeps working on its socket and a new connection gets the new certificate', async () => {
    const files = { cert: join(dir, 'live.pem'), key: join(dir, 'live-key.pem') }
    copyFileSync(server.certFile, files.cert)
    copyFileSync(server.keyFile, files.key)
    const { log, records } = capturedLogger()
    const gateway = await startGateway(configFrom(tree({ tls: { cert_file: files.cert, key_file: files.key } })), { log })
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: ca.certPem })
    try {
      const before = await get(`${gateway.url}/healthz`, { agent })
      expect(before.fingerprint).toBe(fingerprintOf(server.certPem))

      const renewed = ca.issue('renewed', { commonName: 'renewed' })
      copyFileSync(renewed.certFile, files.cert)
      copyFileSync(renewed.keyFile, files.key)
      expect(gateway.reloadCertificates()).toBe(true)
      // The new context keeps the floor.
      await expect(handshake(Number(new URL(gateway.url).port), 'TLSv1.1')).rejects.toThrow(/protocol version|unsupported protocol|alert/i)

      const again = await get(`${gateway.url}/healthz`, { agent })
      expect(again).toMatchObject({ status: 200, reused: true, localPort: before.localPort })
      expect(again.fingerprint).toBe(fingerprintOf(server.certPem)) // the same TLS session, opened before

      const fresh = await get(`${gateway.url}/healthz`, { ca: ca.certPem, agent: false })
      expect(fresh.status).toBe(200)
      expect(fresh.fingerprint).toBe(fingerprintOf(renewed.certPem))
      expect(records().find((r) => String(r.message).startsWith('tls certificate reloaded'))).toMatchObject({
        level: 'info',
        key: 'tls',
        subject: 'CN=renewed',
      })
    } finally {
      agent.destroy()
      await gateway.shutdown()
    }
  })

  test.each([
    [
      "a key that is not the certificate's",
      (f: { cert: string; key: string }) => copyFileSync(ca.issue('other').keyFile, f.key),
      /tls\.key_file: .*live2-key\.pem is not the private key of the certificate/,
    ],
    [
      'a certificate file that is not PEM',
      (f: { cert: string; key: string }) => writeFileSync(f.cert, 'half-written\n'),
      /tls\.cert_file: .*live2\.pem is not PEM/,
    ],
    [
      'a truncated certificate',
      (f: { cert: string; key: string }) => writeFileSync(f.cert, server.certPem.slice(0, 200)),
      /tls\.cert_file: .*live2\.pem is not a PEM certificate/,
    ],
  ])('%s on reload: the old certificate stays, an error is logged, the rest of the reload applies', async (_name, spoil, logged) => {
    const files = { cert: join(dir, 'live2.pem'), key: join(dir, 'live2-key.pem') }
    copyFileSync(server.certFile, files.cert)
    copyFileSync(server.keyFile, files.key)
    const { log, records } = capturedLogger()
    const config = tree({ tls: { cert_file: files.cert, key_file: files.key } })
    const gateway = await startGateway(configFrom(config), { log })
    try {
      spoil(files)
      expect(gateway.reloadCertificates()).toBe(false)
      const rejected = records().find((r) => String(r.message).startsWith('tls certificate reload rejected'))
      expect(rejected).toMatchObject({ level: 'error', key: 'tls' })
      expect(String(rejected?.error)).toMatch(logged)
      const after = await get(`${gateway.url}/healthz`, { ca: ca.certPem, agent: false })
      expect(after).toMatchObject({ status: 200, fingerprint: fingerprintOf(server.certPem) })
      // The config half of a reload does not depend on the certificates.
      expect(gateway.reload(configFrom({ ...config, policy: { default: 'deny' } }))).toEqual([])
      expect(records().some((r) => String(r.message).startsWith('configuration reloaded'))).toBe(true)
    } finally {
      await gateway.shutdown()
    }
  })
})

describe('startup with bad files fails naming the key and the file', () => {
  test.each([
    [
      'a missing certificate file',
      () => ({ cert_file: join(dir, 'nope.pem'), key_file: server.keyFile }),
      /^tls\.cert_file: .*nope\.pem cannot be read \(ENOENT\)$/,
    ],
    [
      'a key of another certificate',
      () => ({ cert_file: server.certFile, key_file: ca.keyFile }),
      /^tls\.key_file: .*ca-key\.pem is not the private key of the certificate in .*server\.pem/,
    ],
    [
      'a certificate given as the key',
      () => ({ cert_file: server.certFile, key_file: server.certFile }),
      /^tls\.key_file: .*server\.pem is not an unencrypted PEM private key/,
    ],
    [
      'a client CA file that is not a certificate',
      () => ({ cert_file: server.certFile, key_file: server.keyFile, ca_file: server.keyFile }),
      /^tls\.ca_file: .*server-key\.pem is not a PEM certificate/,
    ],
  ])('%s', async (_name, tls, message) => {
    const failure = await startGateway(configFrom(tree({ tls: tls() })), { log: silentLogger() }).then(
      (g) => g.shutdown().then(() => null),
      (err: unknown) => err,
    )
    expect(failure).toMatchObject({ code: 'WL_CONFIG_INVALID' })
    expect((failure as Error).message).toMatch(message)
  })
})

describe('client certificates (tls.ca_file)', () => {
  let gateway: RunningGateway
  let clients: TestCa
  beforeAll(async () => {
    const clientDir = tempDir('wardline-tls-clients-')
    clients = makeTestCa(clientDir, 'Wardline Test Client CA')
    gateway = await startGateway(
      configFrom(tree({ tls: { cert_file: server.certFile, key_file: server.keyFile, ca_file: clients.certFile } })),
      { log: silentLogger() },
    )
  })
  afterAll(() => gateway.shutdown())

  test('a client presenting a certificate of that CA gets in', async () => {
    const alice = clients.issue('alice', { client: true })
    const res = await get(`${gateway.url}/healthz`, { ca: ca.certPem, cert: alice.certPem, key: alice.keyPem, agent: false })
    expect(res.status).toBe(200)
  })

  test('a client with no certificate, or one from another CA, fails the handshake; the gateway goes on serving', async () => {
    await expect(get(`${gateway.url}/healthz`, { ca: ca.certPem, agent: false })).rejects.toThrow()
    const stranger = ca.issue('stranger', { client: true })
    await expect(
      get(`${gateway.url}/healthz`, { ca: ca.certPem, cert: stranger.certPem, key: stranger.keyPem, agent: false }),
    ).rejects.toThrow()
    const alice = clients.issue('alice2', { client: true })
    expect((await get(`${gateway.url}/healthz`, { ca: ca.certPem, cert: alice.certPem, key: alice.keyPem, agent: false })).status).toBe(200)
  })
})

describe('the admin listener over TLS (admin.tls)', () => {
  test('the CLI trusts the certificate admin.tls.cert_file names, whatever host it was issued for, and no other', async () => {
    const named = ca.issue('admin-named', { onlyName: true })
    const gateway = await startGateway(
      configFrom(
        tree({
          tls: undefined,
          admin: { listen: '127.0.0.1:0', token: ADMIN_TOKEN, tls: { cert_file: named.certFile, key_file: named.keyFile } },
        }),
      ),
      { log: silentLogger() },
    )
    try {
      const call = { method: 'GET', path: '/revocations' } as const
      // The same certificate from a CA the CLI does not know: trusted only because it is the configured one.
      await expect(callAdmin(gateway.adminUrl as string, ADMIN_TOKEN, { ...call, trust: named.certPem })).resolves.toMatchObject({
        revocations: [],
      })
      // A file holding another certificate (the gateway not yet sent SIGHUP after a renewal, say).
      await expect(callAdmin(gateway.adminUrl as string, ADMIN_TOKEN, { ...call, trust: server.certPem })).rejects.toThrow(
        /presented a certificate the CLI does not accept \(\w+\)/,
      )
      // The CA trusted but the name is not 127.0.0.1's: the ordinary host check still applies to anything not pinned.
      await expect(callAdmin(gateway.adminUrl as string, ADMIN_TOKEN, { ...call, trust: ca.certPem })).rejects.toThrow(
        /ERR_TLS_CERT_ALTNAME_INVALID/,
      )
    } finally {
      await gateway.shutdown()
    }
  })

  test('its URL is https, an admin call succeeds over it with the CA trusted, and a reload gives it a new certificate', async () => {
    const files = { cert: join(dir, 'admin.pem'), key: join(dir, 'admin-key.pem') }
    copyFileSync(server.certFile, files.cert)
    copyFileSync(server.keyFile, files.key)
    const gateway = await startGateway(
      configFrom(
        tree({ tls: undefined, admin: { listen: '127.0.0.1:0', token: ADMIN_TOKEN, tls: { cert_file: files.cert, key_file: files.key } } }),
      ),
      { log: silentLogger() },
    )
    try {
      expect(gateway.url).toMatch(/^http:\/\//) // the main listener has no tls block: plain HTTP
      expect(gateway.adminUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)
      const listed = await get(`${gateway.adminUrl}/revocations`, {
        ca: ca.certPem,
        agent: false,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      })
      expect(listed).toMatchObject({ status: 200, fingerprint: fingerprintOf(server.certPem) })
      await expect(
        callAdmin(gateway.adminUrl as string, ADMIN_TOKEN, { method: 'GET', path: '/revocations', trust: server.certPem }),
      ).resolves.toMatchObject({ revocations: [] })

      const renewed = ca.issue('admin-renewed')
      copyFileSync(renewed.certFile, files.cert)
      copyFileSync(renewed.keyFile, files.key)
      expect(gateway.reloadCertificates()).toBe(true)
      const after = await get(`${gateway.adminUrl}/revocations`, {
        ca: ca.certPem,
        agent: false,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      })
      expect(after).toMatchObject({ status: 200, fingerprint: fingerprintOf(renewed.certPem) })
    } finally {
      await gateway.shutdown()
    }
  })
})

describe('the tls: block in the file', () => {
  const base = 'upstream: http://127.0.0.1:1\nauth: {mode: header}\n'
  test.each([
    ['tls: {cert_file: a.pem, key_file: b.pem}', []],
    ['tls: {cert_file: a.pem, key_file: b.pem, ca_file: c.pem}', []],
    ['tls: {cert_file: a.pem}', ['tls.key_file: is required in tls (the PEM private key of the certificate)']],
    ['tls: {key_file: b.pem}', ['tls.cert_file: is required in tls (the PEM certificate, its chain after it)']],
    ['tls: {cert_file: "", key_file: b.pem}', ['tls.cert_file: must not be empty']],
    ['tls: on', ['tls: must be a mapping']],
    [
      'tls: {cert_file: a.pem, key_file: b.pem, min_version: TLSv1.3}',
      ['tls.min_version: unknown key (allowed: cert_file, key_file, ca_file)'],
    ],
  ])('%s', (text, problems) => {
    expect(configProblems(base + text)).toEqual(problems)
  })

  test('paths are relative to the config file, and changing them is a restart key (SIGHUP re-reads the same paths)', () => {
    const a = configFrom(
      { upstream: 'http://127.0.0.1:1', auth: { mode: 'header' }, tls: { cert_file: 'a.pem', key_file: 'b.pem' } },
      {},
      '/etc/wardline',
    )
    expect(a.tls).toEqual({ certFile: '/etc/wardline/a.pem', keyFile: '/etc/wardline/b.pem', caFile: null })
    const b = configFrom(
      { upstream: 'http://127.0.0.1:1', auth: { mode: 'header' }, tls: { cert_file: 'c.pem', key_file: 'b.pem' } },
      {},
      '/etc/wardline',
    )
    expect(keysNeedingRestart(a, b)).toEqual(['tls'])
  })
})
