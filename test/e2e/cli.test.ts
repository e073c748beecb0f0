/**
 * The real CLI as an operator runs it: `node dist/src/main.js …` in a child process, from a build of
 * the current sources (test/helpers/cli.ts says how and why).
 */
import { execFileSync, spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { type AddressInfo, connect } from 'node:net'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { ROOT, cliMain, killServed, runCli as cli, startServe as serve } from '../helpers/cli'
import { readJsonl, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, gate, startRawUpstream } from './raw-upstream'

/** A second signal sooner than this after the first is ignored (REPEATED_SIGNAL_MS in src/cli/serve.ts). */
const REPEATED_SIGNAL_MS = 1000

function writeConfig(dir: string, text: string): string {
  const file = join(dir, 'wardline.yaml')
  writeFileSync(file, text)
  return file
}

describe('wardline --version, --help and check-config', () => {
  test('--version prints the package version', () => {
    const { version } = JSON.parse(
      execFileSync('node', ['-p', 'JSON.stringify(require("./package.json"))'], { cwd: ROOT, encoding: 'utf8' }),
    ) as { version: string }
    expect(cli(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' })
  })

  test('--help lists the commands', () => {
    const r = cli(['--help'])
    expect(r.code).toBe(0)
    expect(r.stdout).toMatch(/Usage: wardline/)
    expect(r.stdout).toMatch(/^\s+serve \[options\]/m)
    expect(r.stdout).toMatch(/^\s+check-config \[options\]/m)
  })

  test('check-config on a valid file prints ok and exits 0', () => {
    const file = writeConfig(
      tempDir(),
      'listen: 127.0.0.1:0\nupstream: http://127.0.0.1:3001\nauth: { mode: header }\naudit: { output: audit.jsonl }\n',
    )
    expect(cli(['check-config', '--config', file])).toEqual({ code: 0, stdout: `${file}: ok\n`, stderr: '' })
  })

  test('check-config prints every problem with its key path and exits 1', () => {
    const file = writeConfig(
      tempDir(),
      [
        'listen: nowhere',
        'upstream: ftp://example.com',
        'max_body_bytes: -5',
        'features: { teleport: true }',
        'upstream_timeout_seconds: "${WARDLINE_TEST_UNSET_VAR}"',
        'auth: { mode: header }',
      ].join('\n'),
    )
    const r = cli(['check-config', '--config', file])
    expect(r.code).toBe(1)
    expect(r.stdout).toBe('')
    const lines = r.stderr.trimEnd().split('\n')
    expect(lines[0]).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: \\d+ problems$`))
    const problems = lines.slice(1).map((l) => l.trim())
    expect(Number(/(\d+) problems$/.exec(lines[0])?.[1])).toBe(problems.length)
    for (const key of ['listen:', 'upstream:', 'max_body_bytes:', 'features', 'WARDLINE_TEST_UNSET_VAR']) {
      expect(problems.some((p) => p.includes(key))).toBe(true)
    }
  })

  test('check-config on a missing file says it cannot be read and exits 1', () => {
    const r = cli(['check-config', '--config', '/nonexistent/wardline.yaml'])
    expect(r.code).toBe(1)
    expect(r.stderr).toMatch(/cannot be read \(ENOENT\)/)
  })

  test('serve with an invalid file reports why, with its code, as one JSON log line (stderr is a pipe) and exits 1 without listening', () => {
    const file = writeConfig(tempDir(), 'upstream: nope\nauth: { mode: header }\n')
    const r = cli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1)
    expect(JSON.parse(r.stderr)).toEqual({
      level: 'error',
      message: 'configuration invalid: the gateway did not start',
      code: 'WL_CONFIG_INVALID',
      config: file,
      problems: ['upstream: must be an absolute URL'],
      timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/) as unknown,
    })
  })
})

/** Whether a new TCP connection to the port is refused (the listener is closed), rather than accepted. */
function refusesConnections(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(false)
    })
    socket.once('error', () => resolve(true))
  })
}

describe('wardline serve', () => {
  let upstream: RawUpstream | null = null
  afterEach(async () => {
    killServed() // a test that failed before it stopped its child
    await upstream?.close()
    upstream = null
  })

  test('with the audit trail on stdout, a reader that goes away fails audit writes but never the gateway', async () => {
    upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } }))
    })
    const served = await serve(
      writeConfig(tempDir(), `listen: 127.0.0.1:0\nupstream: ${upstream.url}\nauth: { mode: header }\naudit: { output: stdout }\n`),
    )
    const post = () =>
      fetch(`http://127.0.0.1:${served.port}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-wardline-identity': 'alice' },
        body: JSON.stringify(toolCall('echo', {}, 1)),
      }).then((r) => r.status)
    expect(await post()).toBe(200)
    await waitFor(() => served.stdout().includes('"decision":"allow"'), { what: 'the first audit line on stdout' })
    served.child.stdout.destroy() // the pipe's reader is gone: the next writes get EPIPE
    for (let i = 0; i < 5; i++) expect(await post()).toBe(200)
    await waitFor(() => served.stderr().includes('audit write failed'), { what: 'the failed audit write to be logged' })
    expect(served.child.exitCode).toBeNull()
    expect((await fetch(`http://127.0.0.1:${served.port}/healthz`)).status).toBe(200)
    served.child.kill('SIGTERM')
    await served.exited
  })

  test('SIGTERM: readiness turns 503, then new connections are refused, the in-flight request completes with Connection: close, the audit is flushed, exit 0', async () => {
    const release = gate()
    upstream = await startRawUpstream(async (_req, res) => {
      await release.wait // answers only when the test says so: the request is in flight across SIGTERM
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } }))
    })
    const dir = tempDir()
    const auditFile = join(dir, 'audit.jsonl')
    const served = await serve(
      writeConfig(
        dir,
        `listen: 127.0.0.1:0\nupstream: ${upstream.url}\nauth: { mode: header }\naudit: { output: ${auditFile} }\nshutdown_delay_seconds: 0.5\n`,
      ),
    )
    const base = `http://127.0.0.1:${served.port}`
    expect((await fetch(`${base}/readyz`)).status).toBe(200)

    const call = fetch(`${base}/mcp`, {
      method: 'POST',
      headers: { 'x-wardline-identity': 'alice', 'content-type': 'application/json' },
      body: JSON.stringify(toolCall('echo', {}, 1)),
    })
    await waitFor(() => upstream!.seen.length === 1, { what: 'the call to reach the upstream' })

    served.child.kill('SIGTERM')
    await waitFor(() => served.stderr().includes('shutting down'), { what: 'the shutdown log line' })
    // During shutdown_delay_seconds the listener still accepts, and /readyz tells load balancers to stop.
    const ready = await fetch(`${base}/readyz`)
    expect([ready.status, ready.headers.get('connection'), await ready.json()]).toEqual([503, 'close', { status: 'shutting_down' }])
    // Once shutdown_delay_seconds is over, the listener closes.
    await waitFor(() => refusesConnections(served.port), { what: 'the listener to close after shutdown_delay_seconds' })
    await expect(fetch(`${base}/healthz`)).rejects.toThrow()
    release.open()

    const answered = await call
    expect([answered.status, answered.headers.get('connection')]).toEqual([200, 'close'])
    expect(await answered.json()).toEqual({ jsonrpc: '2.0', id: 1, result: { content: [] } })
    expect(await served.exited).toBe(0)
    expect(readJsonl(auditFile).map((e) => [e.method, e.tool, e.decision, e.status])).toEqual([['tools/call', 'echo', 'allow', 200]])
  })

  test('SIGTERM while starting (before "wardline listening") stops the gateway once started, with 0, not by the default action', async () => {
    // An upstream that accepts and never answers: startup waits for the first health probe to time out,
    // a window in which the signal arrives.
    const hung = createServer(() => undefined)
    await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve))
    const dir = tempDir()
    const file = writeConfig(
      dir,
      [
        'listen: 127.0.0.1:0',
        `upstream: http://127.0.0.1:${(hung.address() as AddressInfo).port}`,
        'auth: { mode: header }',
        `audit: { output: ${join(dir, 'audit.jsonl')} }`,
        'upstream_health_check: { timeout_seconds: 2 }',
        '',
      ].join('\n'),
    )
    const child = spawn(process.execPath, [cliMain(), 'serve', '--config', file], { cwd: ROOT })
    let stderr = ''
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')))
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.on('exit', (code, signal) => resolve([code, signal])),
    )
    try {
      // Logged while the gateway is wired, before the first probe is awaited.
      await waitFor(() => stderr.includes('auth.mode is header'), { what: 'startup to begin wiring' })
      expect(stderr).not.toContain('wardline listening')
      child.kill('SIGTERM')
      expect(await exited).toEqual([0, null])
      expect(stderr).toContain('stop requested while starting')
      expect(stderr).toContain('shutting down')
    } finally {
      child.kill('SIGKILL')
      hung.closeAllConnections()
      await new Promise((resolve) => hung.close(resolve))
    }
  })

  test('a second signal while shutdown is stuck on an audit write that never completes exits at once, with 1', async () => {
    upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"jsonrpc":"2.0","id":1,"result":{}}')
    })
    const served = await serve(
      writeConfig(tempDir(), `listen: 127.0.0.1:0\nupstream: ${upstream.url}\nauth: { mode: header }\naudit: { output: stdout }\n`),
    )
    served.child.stdout.pause() // a log shipper that stopped reading: once the pipe is full, writes never complete
    const post = () =>
      fetch(`http://127.0.0.1:${served.port}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-wardline-identity': 'alice' },
        body: JSON.stringify(toolCall('echo', { text: 'x'.repeat(200) }, 1)),
      }).then((r) => r.status)
    // Until the trail is stuck for certain: this side's buffer is full (it reads no more), and the queue
    // holds more than a writer merely behind ever does. Behind, it holds up to a round's 50 entries and
    // then empties; stuck, it grows by every round. A queue that is only not empty can be a loaded
    // machine's writer catching up. How many calls fill the pipe depends on the machine, so it is observed.
    const queued = async (): Promise<number> => {
      const text = await (await fetch(`http://127.0.0.1:${served.port}/metrics`)).text()
      return Number(/^wardline_audit_queue_entries\{sink="stdout"\} (\d+)$/m.exec(text)?.[1] ?? 0)
    }
    const stuck = async (): Promise<boolean> =>
      served.child.stdout.readableLength >= served.child.stdout.readableHighWaterMark && (await queued()) >= 300
    for (let round = 0; !(await stuck()); round++) {
      expect(round).toBeLessThan(200)
      expect((await Promise.all(Array.from({ length: 50 }, post))).every((s) => s === 200)).toBe(true)
    }
    served.child.kill('SIGTERM')
    await waitFor(() => served.stderr().includes('shutting down'), { what: 'the shutdown log line' })
    const firstSignalSeenAt = performance.now() // no earlier than the child's own mark of the first signal
    served.child.kill('SIGTERM') // the same Ctrl-C delivered twice at once (terminal and runner): ignored
    // The repeat window is the child's wall clock, which no test can move: wait it out, counted from a
    // moment known to be after the first signal. Nothing observable happens meanwhile (that is the point).
    await waitFor(() => performance.now() - firstSignalSeenAt > REPEATED_SIGNAL_MS, { what: 'the repeated-signal window to pass' })
    expect(served.child.exitCode).toBeNull() // still waiting on the audit trail
    const started = performance.now()
    served.child.kill('SIGTERM')
    expect(await served.exited).toBe(1)
    expect(served.stderr()).toContain('second signal during shutdown')
    // Left alone, the stuck audit write would hold the exit forever; "at once" is taken generously.
    expect(performance.now() - started).toBeLessThan(5_000)
  })

  test('audit.output stdout puts the trail, and nothing else, on stdout; logs go to stderr as JSON', async () => {
    upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"jsonrpc":"2.0","id":1,"result":{}}')
    })
    const served = await serve(
      writeConfig(tempDir(), `listen: 127.0.0.1:0\nupstream: ${upstream.url}\nauth: { mode: header }\naudit: { output: stdout }\n`),
    )
    const base = `http://127.0.0.1:${served.port}`
    expect(
      (
        await fetch(`${base}/mcp`, {
          method: 'POST',
          headers: { 'x-wardline-identity': 'alice', 'content-type': 'application/json' },
          body: JSON.stringify(toolCall('echo')),
        })
      ).status,
    ).toBe(200)
    expect((await fetch(`${base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status).toBe(401)
    served.child.kill('SIGINT')
    expect(await served.exited).toBe(0)
    const lines = served.stdout().trimEnd().split('\n')
    expect(lines.map((l) => JSON.parse(l) as { decision: string; status: number }).map((e) => [e.decision, e.status])).toEqual([
      ['allow', 200],
      ['unauthorized', 401],
    ])
    for (const line of served.stderr().trimEnd().split('\n')) expect(() => JSON.parse(line) as unknown).not.toThrow()
  })
})
