import { type AddressInfo, type Server, type Socket, createServer } from 'node:net'
import { WardlineError } from '../../src/errors'
import { startGateway, type RunningGateway } from '../../src/server/compose'
import { upstreamErrorKind, upstreamFailureReporter } from '../../src/upstream/failures'
import { type RawUpstream, startRawUpstream } from '../e2e/raw-upstream'
import { MCP_HEADERS, as, configFrom, metricSample, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { join } from 'node:path'
import { capturingLogger } from '../budget/budget-harness'
import { waitFor } from '../helpers/wait'

interface Started {
  readonly gateway: RunningGateway
  readonly auditFile: string
  readonly lines: () => Array<Record<string, unknown>>
}

async function gatewayFor(upstream: string, extra: Record<string, unknown> = {}): Promise<Started> {
  const dir = tempDir()
  const auditFile = join(dir, 'audit.jsonl')
  const { log, lines: logged } = capturingLogger()
  const config = configFrom({ listen: '127.0.0.1:0', upstream, auth: { mode: 'header' }, audit: { output: auditFile }, ...extra }, {}, dir)
  return { gateway: await startGateway(config, { log }), auditFile, lines: () => logged }
}

async function call(url: string, tool = 'echo'): Promise<number> {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as('alice') },
    body: JSON.stringify(toolCall(tool)),
  })
  await res.arrayBuffer().catch(() => undefined)
  return res.status
}

function kindCount(url: string, kind: string): Promise<number> {
  return metricSample(url, `wardline_upstream_errors_total{kind="${kind}"}`)
}

/** A TCP server that answers every connection with `onConnection` (for what node:http would never send). */
async function tcpServer(onConnection: (socket: Socket) => void): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>()
  const server: Server = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => undefined)
    onConnection(socket)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}

describe('wardline_upstream_errors_total{kind} against real failing upstreams', () => {
  const cleanup: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const close of cleanup.splice(0).reverse()) await close()
  })

  test('a dead port: every call is 502 and counted as unreachable; the log says so once, not once per call', async () => {
    const dead = await startRawUpstream((_req, res) => void res.end())
    const url = dead.url
    await dead.close()
    const s = await gatewayFor(url)
    cleanup.push(() => s.gateway.shutdown())
    for (let i = 0; i < 20; i++) expect(await call(s.gateway.url)).toBe(502)
    expect(await kindCount(s.gateway.url, 'unreachable')).toBe(20)
    for (const other of ['timeout', 'reset', 'bad_response', 'other']) expect(await kindCount(s.gateway.url, other)).toBe(0)
    await s.gateway.audit.flush()
    const audit = readJsonl(s.auditFile)
    expect(audit.filter((e) => e.decision === 'error' && e.status === 502 && e.reason?.startsWith('WL_UPSTREAM_UNREACHABLE')).length).toBe(
      20,
    )
    const warnings = s.lines().filter((l) => l.level === 'warn' && String(l.message).startsWith('upstream unreachable'))
    expect(warnings).toHaveLength(1)
    expect(warnings[0]).toMatchObject({ code: 'WL_UPSTREAM_UNREACHABLE', kind: 'unreachable', upstream: new URL(url).origin })
    expect(String(warnings[0].cause)).toContain('ECONNREFUSED')
  })

  test('a hanging upstream: 504 after upstream_timeout_seconds, counted as timeout', async () => {
    const hang = await startRawUpstream(() => undefined) // reads the request, never answers
    cleanup.push(() => hang.close())
    const s = await gatewayFor(hang.url, { upstream_timeout_seconds: 0.3 })
    cleanup.push(() => s.gateway.shutdown())
    expect(await call(s.gateway.url)).toBe(504)
    expect(await call(s.gateway.url)).toBe(504)
    expect(await kindCount(s.gateway.url, 'timeout')).toBe(2)
    expect(await kindCount(s.gateway.url, 'unreachable')).toBe(0)
    expect(s.lines().filter((l) => l.kind === 'timeout')).toHaveLength(1)
  })

  test('a connection reset before the answer: 502, counted as reset', async () => {
    const reset = await tcpServer((socket) => socket.once('data', () => socket.resetAndDestroy()))
    cleanup.push(() => reset.close())
    const s = await gatewayFor(reset.url)
    cleanup.push(() => s.gateway.shutdown())
    expect(await call(s.gateway.url)).toBe(502)
    expect(await kindCount(s.gateway.url, 'reset')).toBe(1)
    expect(await kindCount(s.gateway.url, 'unreachable')).toBe(0)
  })

  test('a connection closed in the middle of a streamed answer: the stream is cut, counted as reset', async () => {
    const upstream: RawUpstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n')
      setTimeout(() => res.socket?.destroy(), 50) // the upstream's own pace: the event goes out first, the break a moment later
    })
    cleanup.push(() => upstream.close())
    const s = await gatewayFor(upstream.url)
    cleanup.push(() => s.gateway.shutdown())
    const res = await fetch(`${s.gateway.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('echo')),
    })
    expect(res.status).toBe(200)
    await expect(res.text()).rejects.toThrow()
    await s.gateway.audit.flush()
    const last = readJsonl(s.auditFile).at(-1)
    expect(last?.decision).toBe('error')
    expect(last?.reason).toContain('upstream response broke off')
    expect(await kindCount(s.gateway.url, 'reset')).toBe(1)
  })

  test('an answer that is not HTTP: 502, counted as bad_response', async () => {
    const garbage = await tcpServer((socket) => socket.once('data', () => socket.end('HTTP/1.1 ok then\r\nnot a header line\r\n\r\n')))
    cleanup.push(() => garbage.close())
    const s = await gatewayFor(garbage.url)
    cleanup.push(() => s.gateway.shutdown())
    expect(await call(s.gateway.url)).toBe(502)
    expect(await kindCount(s.gateway.url, 'bad_response')).toBe(1)
  })

  test('a client that leaves is not an upstream error', async () => {
    const slow = await startRawUpstream(() => undefined) // never answers: only the client can end it
    cleanup.push(() => slow.close())
    const s = await gatewayFor(slow.url)
    cleanup.push(() => s.gateway.shutdown())
    const controller = new AbortController()
    const pending = fetch(`${s.gateway.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('echo')),
      signal: controller.signal,
    }).catch(() => null)
    // The call is upstream (the server holds it) before the client leaves, and the gateway has
    // written its one entry for it before the counters are read.
    await waitFor(() => slow.seen.length === 1, { what: 'the call to reach the upstream' })
    controller.abort()
    await pending
    await waitFor(async () => (await s.gateway.audit.flush(), readJsonl(s.auditFile).length === 1), { what: 'the audit entry of the call' })
    for (const kind of ['unreachable', 'timeout', 'reset', 'bad_response', 'other']) expect(await kindCount(s.gateway.url, kind)).toBe(0)
  })
})

describe('the rate-limited upstream warning', () => {
  test('one line per kind a minute, and the next says how many were held back', () => {
    const { log, lines: logged } = capturingLogger()
    const lines = (): typeof logged => logged
    let now = 1_000_000
    const counted: string[] = []
    const report = upstreamFailureReporter(
      (k) => counted.push(k),
      log,
      'http://mcp.internal:3001/mcp?x=1',
      60_000,
      () => now,
    )
    const unreachable = new WardlineError('WL_UPSTREAM_UNREACHABLE', 'upstream unreachable', {
      cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    })
    const timeout = new WardlineError('WL_UPSTREAM_TIMEOUT', 'upstream sent no response headers in time')
    for (let i = 0; i < 500; i++) report(unreachable)
    report(timeout)
    now += 59_999
    report(unreachable)
    expect(lines()).toHaveLength(2)
    now += 1
    report(unreachable)
    const all = lines()
    expect(all).toHaveLength(3)
    expect(all[0]).toMatchObject({ level: 'warn', kind: 'unreachable', upstream: 'http://mcp.internal:3001' })
    expect(all[0]).not.toHaveProperty('suppressed_since_last')
    expect(all[1]).toMatchObject({ kind: 'timeout', code: 'WL_UPSTREAM_TIMEOUT' })
    expect(all[2]).toMatchObject({ kind: 'unreachable', suppressed_since_last: 500 })
    expect(counted.filter((k) => k === 'unreachable')).toHaveLength(502)
  })

  test('WL_UPSTREAM_FAILED is split by its cause', () => {
    const failed = (code?: string): WardlineError =>
      new WardlineError('WL_UPSTREAM_FAILED', 'x', code === undefined ? undefined : { cause: Object.assign(new Error(code), { code }) })
    expect(upstreamErrorKind(failed('UND_ERR_SOCKET'))).toBe('reset')
    expect(upstreamErrorKind(failed('ECONNRESET'))).toBe('reset')
    expect(upstreamErrorKind(failed('HPE_INVALID_HEADER_TOKEN'))).toBe('bad_response')
    expect(upstreamErrorKind(failed('UND_ERR_RES_CONTENT_LENGTH_MISMATCH'))).toBe('bad_response')
    const parser = Object.assign(new Error('Response does not match the HTTP/1.1 protocol (Invalid status code)'), {
      name: 'HTTPParserError',
    })
    expect(upstreamErrorKind(new WardlineError('WL_UPSTREAM_FAILED', 'x', { cause: parser }))).toBe('bad_response')
    expect(upstreamErrorKind(failed())).toBe('bad_response') // the gateway's own "not readable"
    expect(upstreamErrorKind(failed('EWHATEVER'))).toBe('other')
    expect(upstreamErrorKind(new WardlineError('WL_INTERNAL', 'x'))).toBe('other')
  })
})
