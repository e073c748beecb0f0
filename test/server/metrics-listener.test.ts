/**
 * metrics.listen: /metrics on a listener of its own, a 404 (never proxied) on the public one,
 * /healthz and /readyz on both, a clear bind failure, closed at shutdown.
 */
import { connect } from 'node:net'
import { PassThrough } from 'node:stream'
import { createLogger, silentLogger } from '../../src/log'
import { startGateway } from '../../src/server/compose'
import { occupiedPort } from '../helpers/cli'
import { type Harness, configFrom, configProblems, startHarness } from '../helpers/harness'

describe('with metrics.listen', () => {
  let h: Harness
  beforeAll(async () => (h = await startHarness({ config: { metrics: { listen: '127.0.0.1:0' } } })))
  afterAll(() => h.close())

  test('/metrics is served on the metrics listener, plain HTTP, with the gateway counters', async () => {
    expect(h.gateway.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    const res = await fetch(`${h.gateway.metricsUrl}/metrics`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('text/plain')
    expect(await res.text()).toContain('wardline_requests_total')
  })

  test('the public listener answers /metrics 404 itself, on any method and with a query: nothing reaches the upstream or the audit trail', async () => {
    const seenBefore = h.upstream.seen.length
    for (const [method, path] of [
      ['GET', '/metrics'],
      ['POST', '/metrics'],
      ['GET', '/metrics?format=openmetrics'],
    ]) {
      const res = await fetch(`${h.url}${path}`, { method })
      expect(res.status).toBe(404)
      expect(await res.json()).toEqual({ jsonrpc: '2.0', id: null, error: { code: 404, message: 'Not found' } })
    }
    expect(h.upstream.seen.length).toBe(seenBefore)
    expect((await h.audit()).filter((e) => e.method === '' && e.status === 404)).toEqual([])
  })

  test('/healthz and /readyz answer on both listeners; anything else on the metrics listener is a 404', async () => {
    for (const base of [h.url, h.gateway.metricsUrl as string]) {
      expect((await fetch(`${base}/healthz`)).status).toBe(200)
      expect(await (await fetch(`${base}/readyz`)).json()).toMatchObject({ status: 'ready' })
    }
    const mcp = await fetch(`${h.gateway.metricsUrl}/mcp`, { method: 'POST', body: '{}' })
    expect(mcp.status).toBe(404)
  })
})

test('a metrics.listen that cannot be bound fails startup with WL_LISTEN_FAILED naming the key', async () => {
  const { port, release } = await occupiedPort()
  try {
    const config = configFrom({
      listen: '127.0.0.1:0',
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'header' },
      metrics: { listen: `127.0.0.1:${port}` },
    })
    const failure = await startGateway(config, { log: silentLogger() }).then(
      (g) => g.shutdown().then(() => null),
      (err: unknown) => err,
    )
    expect(failure).toMatchObject({ code: 'WL_LISTEN_FAILED', cause: { code: 'EADDRINUSE' } })
    expect((failure as Error).message).toContain(
      `metrics.listen 127.0.0.1:${port} is already in use (another process listens there): change metrics.listen`,
    )
  } finally {
    await release()
  }
})

test('shutdown closes the metrics listener', async () => {
  const h = await startHarness({ config: { metrics: { listen: '127.0.0.1:0' } } })
  const url = h.gateway.metricsUrl as string
  expect((await fetch(`${url}/metrics`)).status).toBe(200)
  await h.close()
  // A new connection, not fetch's kept-alive one: the port itself must be closed.
  const after = await new Promise<string | undefined>((resolve) => {
    const socket = connect(Number(new URL(url).port), '127.0.0.1', () => {
      socket.destroy()
      resolve('connected')
    })
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code))
  })
  expect(after).toBe('ECONNREFUSED')
})

test('without metrics.listen /metrics stays on the public listener, and startup says how to move it', async () => {
  const stream = new PassThrough()
  let text = ''
  stream.on('data', (c: Buffer) => (text += c.toString('utf8')))
  const gateway = await startGateway(configFrom({ listen: '127.0.0.1:0', upstream: 'http://127.0.0.1:1', auth: { mode: 'header' } }), {
    log: createLogger('info', { format: 'json', stream }),
  })
  try {
    expect(gateway.metricsUrl).toBeNull()
    expect((await fetch(`${gateway.url}/metrics`)).status).toBe(200)
    const note = text
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: string; message: string })
      .find((r) => r.message.startsWith('/metrics is served on the public listener'))
    expect(note).toMatchObject({ level: 'info' })
    expect(note?.message).toContain('metrics.listen (e.g. 127.0.0.1:9464)')
  } finally {
    await gateway.shutdown()
  }
})

describe('metrics.listen in the file', () => {
  const base = 'upstream: http://127.0.0.1:1\nauth: {mode: header}\nlisten: 0.0.0.0:8080\n'
  test.each([
    ['metrics: {listen: 127.0.0.1:9464}', []],
    ['metrics: {listen: "[::1]:9464"}', []],
    ['metrics: {}', []],
    ['metrics: {listen: 9464}', ['metrics.listen: must be a string']],
    ['metrics: {listen: localhost}', ['metrics.listen: must be host:port with a port between 0 and 65535 (e.g. 127.0.0.1:9464)']],
    ['metrics: {listen: 127.0.0.1:8080}', ['metrics.listen: must differ from listen (0.0.0.0:8080): it is a listener of its own']],
    [
      'metrics: {listen: 127.0.0.1:9090}\nadmin: {listen: 127.0.0.1:9090, token: ' + 'c'.repeat(40) + '}',
      ['metrics.listen: must differ from admin.listen (127.0.0.1:9090)'],
    ],
    ['metrics: {port: 9464}', ['metrics.port: unknown key (allowed: listen)']],
  ])('%s', (yamlText, problems) => {
    expect(configProblems(base + yamlText)).toEqual(problems)
  })
})
