/**
 * The upstream health probe (upstream/probe.ts, docs/gateway.md "Upstream health"): a real gateway
 * in front of real servers on port 0 (the official SDK's Streamable HTTP server, and raw node servers
 * that answer 500, stream forever, or never answer), read from the outside: /readyz, /metrics, the log.
 */
import { type IncomingMessage, type Server, createServer } from 'node:http'
import { type AddressInfo, type Socket, createServer as createTcpServer, type Server as TcpServer } from 'node:net'
import { join } from 'node:path'
import { getEventListeners } from 'node:events'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { probeOnce } from '../../src/upstream/probe'
import { configFrom, metricSample, tempDir } from '../helpers/harness'
import { type SdkUpstream, startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'
import { capturingLogger } from '../budget/budget-harness'

interface Rig {
  readonly gateway: RunningGateway
  readonly lines: () => Array<Record<string, unknown>>
  readyz(): Promise<{ status: number; body: { status: string; checks: Record<string, Record<string, unknown>> } }>
}

const opened: Array<() => Promise<unknown>> = []
afterEach(async () => {
  for (const close of opened.splice(0).reverse()) await close()
})

async function gatewayFor(
  upstream: string,
  healthCheck: Record<string, unknown> | undefined,
  extra: Record<string, unknown> = {},
): Promise<Rig> {
  const dir = tempDir()
  const { log, lines: logged } = capturingLogger()
  const tree = {
    listen: '127.0.0.1:0',
    upstream,
    auth: { mode: 'header' },
    audit: { output: join(dir, 'audit.jsonl') },
    ...(healthCheck === undefined ? {} : { upstream_health_check: healthCheck }),
    ...extra,
  }
  const gateway = await startGateway(configFrom(tree, {}, dir), { log })
  opened.push(() => gateway.shutdown())
  return {
    gateway,
    lines: () => logged,
    readyz: async () => {
      const res = await fetch(`${gateway.url}/readyz`)
      return { status: res.status, body: (await res.json()) as Awaited<ReturnType<Rig['readyz']>>['body'] }
    },
  }
}

/** The official SDK's stateful Streamable HTTP server; `seen` gets every request it receives. */
async function sdkUpstream(seen?: IncomingMessage[]): Promise<SdkUpstream> {
  const upstream = await startSdkUpstream(
    () => new McpServer({ name: 'probe-test', version: '1.0.0' }),
    {},
    seen === undefined ? undefined : (req) => void seen.push(req),
  )
  opened.push(() => upstream.close())
  return upstream
}

/** A plain HTTP server on 127.0.0.1 (a given port, or 0) whose handler the test writes. */
async function httpServer(
  handler: Parameters<typeof createServer>[1],
  port = 0,
): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const server = createServer(handler)
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  const close = (): Promise<void> =>
    new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  opened.push(close)
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close }
}

const FAST = { interval_seconds: 0.1, timeout_seconds: 0.5 }

test('an SDK server answers the probe (406: no event stream, no session) and the gateway is ready; /metrics says up', async () => {
  const seen: IncomingMessage[] = []
  const upstream = await sdkUpstream(seen)
  const rig = await gatewayFor(upstream.url, undefined)
  const { status, body } = await rig.readyz()
  expect(status).toBe(200)
  expect(body.status).toBe('ready')
  expect(body.checks.upstream).toMatchObject({ ok: true, url: `${upstream.url}/`, method: 'GET', status: 406 })
  expect(typeof body.checks.upstream.last_checked).toBe('string')
  expect(body.checks.upstream).not.toHaveProperty('cause')
  // What the upstream received: a GET asking for JSON only, carrying nothing of a caller.
  expect(seen).toHaveLength(1)
  expect(seen[0].method).toBe('GET')
  expect(seen[0].headers.accept).toBe('application/json')
  expect(seen[0].headers).not.toHaveProperty('authorization')
  expect(seen[0].headers['mcp-session-id']).toBe('wardline-health-check-not-a-session')
  expect(await metricSample(rig.gateway.url, 'wardline_upstream_up')).toBe(1)
  expect(await metricSample(rig.gateway.url, 'wardline_upstream_last_up_timestamp_seconds')).toBeGreaterThan(Date.now() / 1000 - 60)
  expect(rig.lines()).toContainEqual(
    expect.objectContaining({ level: 'info', message: 'upstream health check passed at startup', status: 406 }),
  )
})

test('a server that opens a session for any request without a session id (as the Python SDK does) gets none from the probe', async () => {
  // A stand-in for the Python SDK's stateful StreamableHTTPSessionManager at the endpoint itself: a
  // request without Mcp-Session-Id gets a new session (whatever its method), an unknown id gets 404.
  let sessions = 0
  let probes = 0
  const upstream = await httpServer((req, res) => {
    probes++
    if (req.headers['mcp-session-id'] === undefined) {
      sessions++
      res.writeHead(406, { 'mcp-session-id': `s${sessions}` }).end()
    } else res.writeHead(404).end()
  })
  const rig = await gatewayFor(`${upstream.url}/mcp`, { interval_seconds: 0.05 })
  await waitFor(() => probes >= 5, { what: 'five probes' })
  expect((await rig.readyz()).body.checks.upstream).toMatchObject({ ok: true, status: 404 })
  expect(sessions).toBe(0)
})

test('a flood of /readyz sends no probe of its own: the upstream sees only the scheduled ones', async () => {
  const seen: IncomingMessage[] = []
  const upstream = await sdkUpstream(seen)
  const rig = await gatewayFor(upstream.url, { interval_seconds: 3600 })
  const answers = await Promise.all(Array.from({ length: 100 }, () => fetch(`${rig.gateway.url}/readyz`).then((r) => r.status)))
  expect(answers.every((s) => s === 200)).toBe(true)
  expect(seen).toHaveLength(1) // the startup probe
})

test('upstream closed: /readyz 503 with the cause within one interval, logged once; back on its port: ready again, logged once', async () => {
  const first = await httpServer((_req, res) => res.writeHead(404).end())
  const port = (first.server.address() as AddressInfo).port
  const rig = await gatewayFor(first.url, FAST)
  expect((await rig.readyz()).status).toBe(200)

  await first.close()
  const closedAt = performance.now()
  const down = await waitFor(
    async () => {
      const r = await rig.readyz()
      return r.status === 503 && r
    },
    { what: '/readyz 503 once the upstream is gone' },
  )
  // One interval plus the probe itself (a refused connection is immediate), with room for a loaded machine.
  expect(performance.now() - closedAt).toBeLessThan(2000)
  expect(down.body.status).toBe('not_ready')
  expect(down.body.checks.upstream).toMatchObject({ ok: false, cause: 'connection refused' })
  expect(down.body.checks.upstream).not.toHaveProperty('status')
  expect(await metricSample(rig.gateway.url, 'wardline_upstream_up')).toBe(0)

  // Several more probes fail (each one stamps /readyz with its own last_checked); the log says it once.
  const failedAt = new Set<unknown>()
  await waitFor(
    async () => {
      const r = await rig.readyz()
      if (r.status === 503) failedAt.add(r.body.checks.upstream.last_checked)
      return failedAt.size >= 4
    },
    { what: 'three more failed probes after the first' },
  )
  const downLines = rig.lines().filter((l) => String(l.message).startsWith('upstream health check failed'))
  expect(downLines).toHaveLength(1)
  expect(downLines[0]).toMatchObject({ level: 'warn', cause: 'connection refused' })

  await httpServer((_req, res) => res.writeHead(405).end(), port)
  const up = await waitFor(
    async () => {
      const r = await rig.readyz()
      return r.status === 200 && r
    },
    { what: '/readyz 200 once the upstream is back' },
  )
  expect(up.body.checks.upstream).toMatchObject({ ok: true, status: 405 })
  expect(await metricSample(rig.gateway.url, 'wardline_upstream_up')).toBe(1)
  const backLines = rig.lines().filter((l) => String(l.message).startsWith('upstream health check passes again'))
  expect(backLines).toHaveLength(1)
  expect(backLines[0]).toMatchObject({ level: 'info', status: 405 })
})

test('an upstream answering 500 is down ("HTTP 500"); a 4xx is up', async () => {
  let status = 500
  const upstream = await httpServer((_req, res) => res.writeHead(status).end('{}'))
  const rig = await gatewayFor(upstream.url, FAST)
  const first = await rig.readyz()
  expect(first.status).toBe(503)
  expect(first.body.checks.upstream).toMatchObject({ ok: false, status: 500, cause: 'HTTP 500' })
  status = 400
  await waitFor(async () => (await rig.readyz()).status === 200, { what: 'ready once the upstream answers 400' })
})

test('an upstream unreachable at startup: the gateway starts, warns with the cause, and /readyz says not_ready', async () => {
  const gone = await httpServer(() => undefined)
  await gone.close()
  const rig = await gatewayFor(gone.url, undefined)
  const { status, body } = await rig.readyz()
  expect(status).toBe(503)
  expect(body.checks.upstream).toMatchObject({ ok: false, cause: 'connection refused' })
  const warning = rig.lines().find((l) => String(l.message).startsWith('upstream health check failed at startup'))
  expect(warning).toMatchObject({ level: 'warn', cause: 'connection refused', probe: `GET ${gone.url}/` })
  expect(warning?.message).toContain('(connection refused)')
})

test('a GET answered with an endless SSE stream: up, and the probe closes its connection without reading the body', async () => {
  const sockets = new Set<Socket>()
  let streams = 0
  const upstream = await httpServer((_req, res) => {
    streams++
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.flushHeaders()
    const tick = setInterval(() => res.write(': keep-alive\n\n'), 20)
    res.on('close', () => clearInterval(tick))
  })
  upstream.server.on('connection', (s: Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  const rig = await gatewayFor(upstream.url, FAST)
  const { status, body } = await rig.readyz()
  expect(status).toBe(200)
  expect(body.checks.upstream).toMatchObject({ ok: true, status: 200 })
  expect(body.checks.upstream.latency_ms).toBeLessThan(500)
  // Several probes later, every probe's connection is closed again: none is left open between probes.
  await waitFor(() => streams >= 4, { what: 'four probes' })
  await rig.gateway.shutdown()
  await waitFor(() => sockets.size === 0, { what: 'every probe connection closed' })
})

test('a hung upstream (accepts, never answers) is down by timeout, and the probe frees its connection', async () => {
  const sockets = new Set<Socket>()
  let accepted = 0
  const server: TcpServer = createTcpServer((s) => {
    // Reads (and ignores) the request, so the probe's close reaches this side as an end.
    s.resume()
    accepted++
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
    s.on('error', () => undefined)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  opened.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  )
  const started = performance.now()
  const rig = await gatewayFor(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
    interval_seconds: 0.1,
    timeout_seconds: 0.3,
  })
  // Startup waited for the first probe, and no longer than its timeout.
  expect(performance.now() - started).toBeLessThan(3000)
  const { status, body } = await rig.readyz()
  expect(status).toBe(503)
  expect(body.checks.upstream).toMatchObject({ ok: false, cause: 'timeout after 0.3 s' })
  // A probe that timed out does not leave its connection behind: after four, at most the one in flight is open.
  await waitFor(() => accepted >= 4 && sockets.size <= 1, { what: 'four probes, their connections closed' })
})

test('probe off (enabled: false): /readyz is as without it, no upstream metric, nothing is sent to the upstream', async () => {
  let requests = 0
  const upstream = await httpServer((_req, res) => {
    requests++
    res.writeHead(500).end()
  })
  const rig = await gatewayFor(upstream.url, { enabled: false, interval_seconds: 0.05 })
  const { status, body } = await rig.readyz()
  expect(status).toBe(200)
  expect(body).toEqual({ status: 'ready', checks: {}, revocations: 'ok', revocations_storage: 'memory', revocations_active: 0 })
  const metrics = await (await fetch(`${rig.gateway.url}/metrics`)).text()
  expect(metrics).not.toContain('wardline_upstream_up')
  // A negative check: nothing marks a probe that never happens, so the test gives one four intervals to come.
  await new Promise((resolve) => setTimeout(resolve, 200))
  expect(requests).toBe(0)
})

test('affects_readiness: false reports a down upstream in /readyz but stays 200', async () => {
  const upstream = await httpServer((_req, res) => res.writeHead(503).end())
  const rig = await gatewayFor(upstream.url, { affects_readiness: false })
  const { status, body } = await rig.readyz()
  expect(status).toBe(200)
  expect(body.status).toBe('ready')
  expect(body.checks.upstream).toMatchObject({ ok: false, cause: 'HTTP 503', affects_readiness: false })
  expect(await metricSample(rig.gateway.url, 'wardline_ready')).toBe(1)
  expect(await metricSample(rig.gateway.url, 'wardline_upstream_up')).toBe(0)
})

test("url and method are the probe: HEAD of the server's own /health, query kept on the wire but not shown", async () => {
  const seen: Array<{ method?: string; url?: string }> = []
  const upstream = await httpServer((req, res) => {
    seen.push({ method: req.method, url: req.url })
    res.writeHead(req.url?.startsWith('/health') ? 204 : 500).end()
  })
  const rig = await gatewayFor(`${upstream.url}/base`, { url: `${upstream.url}/health?key=s3cret`, method: 'HEAD' })
  const { status, body } = await rig.readyz()
  expect(status).toBe(200)
  expect(seen).toEqual([{ method: 'HEAD', url: '/health?key=s3cret' }])
  expect(body.checks.upstream).toMatchObject({ ok: true, status: 204, url: `${upstream.url}/health`, method: 'HEAD' })
  expect(JSON.stringify(body)).not.toContain('s3cret')
  expect(JSON.stringify(rig.lines())).not.toContain('s3cret')
})

test('shutdown stops the probe: no probe reaches the upstream afterwards', async () => {
  let requests = 0
  const upstream = await httpServer((_req, res) => {
    requests++
    res.writeHead(404).end()
  })
  const rig = await gatewayFor(upstream.url, { interval_seconds: 0.05 })
  await waitFor(() => requests >= 3, { what: 'three probes' })
  await rig.gateway.shutdown()
  const after = requests
  // A negative check: nothing marks a probe that never happens, so the test gives one six intervals to come.
  await new Promise((resolve) => setTimeout(resolve, 300))
  expect(requests).toBe(after)
})

test('shutdown does not wait out a probe of a hung upstream: the probe in flight is cut and its connection closed', async () => {
  const sockets = new Set<Socket>()
  let accepted = 0
  // Answers the first connection (the startup probe), then accepts and never answers.
  const server: TcpServer = createTcpServer((s) => {
    s.on('error', () => undefined)
    s.resume() // reads (and ignores) each request, so the probe's close reaches this side
    if (accepted++ === 0) {
      s.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n')
      return
    }
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  opened.push(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const rig = await gatewayFor(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {
    interval_seconds: 0.05,
    timeout_seconds: 30,
  })
  expect((await rig.readyz()).status).toBe(200)
  await waitFor(() => sockets.size === 1, { what: 'a probe waiting on the hung upstream' })
  const started = performance.now()
  await rig.gateway.shutdown()
  expect(performance.now() - started).toBeLessThan(5000)
  await waitFor(() => sockets.size === 0, { what: 'the hung probe connection closed' })
})

test('probes sharing one stop signal leave no listener on it (one probe every 10 s for days would otherwise pile them up)', async () => {
  const upstream = await httpServer((_req, res) => res.writeHead(404).end())
  const stop = new AbortController()
  const config = { url: null, method: 'GET', intervalSeconds: 10, timeoutSeconds: 2, affectsReadiness: true } as const
  for (let i = 0; i < 20; i++) expect((await probeOnce(new URL(upstream.url), config, [], stop.signal)).status).toBe(404)
  expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0)
})
