/**
 * The real CLI as an operator runs it: `node dist/src/main.js …` in a child process. The build is
 * refreshed first when any source file is newer than dist/src/main.js.
 */
import { type ChildProcessWithoutNullStreams, execFileSync, spawn, spawnSync } from 'node:child_process'
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { readJsonl, tempDir, toolCall } from '../helpers/harness'
import { type RawUpstream, gate, startRawUpstream } from './raw-upstream'

const ROOT = join(__dirname, '..', '..')
const MAIN = join(ROOT, 'dist', 'src', 'main.js')

function newestMtime(dir: string): number {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs)
  }
  return newest
}

beforeAll(() => {
  if (!existsSync(MAIN) || statSync(MAIN).mtimeMs < newestMtime(join(ROOT, 'src'))) {
    // Emits even when another area's work in progress has type errors; the CLI is what we test here.
    spawnSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'ignore' })
  }
  expect(existsSync(MAIN)).toBe(true)
}, 180_000)

function cli(args: string[], cwd = ROOT): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, ...args], { cwd, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } })
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr }
}

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

  test('serve with an invalid file reports why and exits 1 without listening', () => {
    const file = writeConfig(tempDir(), 'upstream: nope\n')
    const r = cli(['serve', '--config', file])
    expect(r.code).toBe(1)
    expect(r.stderr).toMatch(/^wardline: .*invalid configuration:\n\s+upstream: must be an absolute URL$/m)
  })
})

interface Served {
  readonly child: ChildProcessWithoutNullStreams
  readonly port: number
  stderr(): string
  stdout(): string
  exited: Promise<number | null>
}

/** Every `serve` child still running; a test that fails before it stops its child leaves it here for afterEach. */
const running = new Set<ChildProcessWithoutNullStreams>()

/** Spawns `serve` and resolves once it logged its listening address (port 0 → the real port). */
async function serve(configFile: string): Promise<Served> {
  const child = spawn(process.execPath, [MAIN, 'serve', '--config', configFile], { cwd: ROOT })
  running.add(child)
  child.on('exit', () => running.delete(child))
  let err = ''
  let out = ''
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const port = await new Promise<number>((resolve, reject) => {
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString('utf8')
      const m = /"listen":"[^"]*:(\d+)"/.exec(err)
      if (m) resolve(Number(m[1]))
    })
    void exited.then((code) => reject(new Error(`serve exited ${code} before listening:\n${err}`)))
  })
  return { child, port, stderr: () => err, stdout: () => out, exited }
}

async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

describe('wardline serve', () => {
  let upstream: RawUpstream | null = null
  afterEach(async () => {
    for (const child of running) child.kill('SIGKILL') // an orphan would keep jest from exiting
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
    await until(() => served.stdout().includes('"decision":"allow"'), 'the first audit line')
    served.child.stdout.destroy() // the pipe's reader is gone: the next writes get EPIPE
    for (let i = 0; i < 5; i++) expect(await post()).toBe(200)
    await until(() => served.stderr().includes('audit write failed'), 'the failed audit write to be logged')
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
    await until(() => upstream!.seen.length === 1, 'the call to reach the upstream')

    served.child.kill('SIGTERM')
    await until(() => served.stderr().includes('shutting down'), 'the shutdown log line')
    // During shutdown_delay_seconds the listener still accepts, and /readyz tells load balancers to stop.
    const ready = await fetch(`${base}/readyz`)
    expect([ready.status, ready.headers.get('connection'), await ready.json()]).toEqual([503, 'close', { status: 'shutting_down' }])
    await new Promise((r) => setTimeout(r, 700)) // past the delay: the listener is closed
    await expect(fetch(`${base}/healthz`)).rejects.toThrow()
    release.open()

    const answered = await call
    expect([answered.status, answered.headers.get('connection')]).toEqual([200, 'close'])
    expect(await answered.json()).toEqual({ jsonrpc: '2.0', id: 1, result: { content: [] } })
    expect(await served.exited).toBe(0)
    expect(readJsonl(auditFile).map((e) => [e.method, e.tool, e.decision, e.status])).toEqual([['tools/call', 'echo', 'allow', 200]])
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
    for (let i = 0; i < 20; i++) expect((await Promise.all(Array.from({ length: 50 }, post))).every((s) => s === 200)).toBe(true)
    served.child.kill('SIGTERM')
    await until(() => served.stderr().includes('shutting down'), 'the shutdown log line')
    served.child.kill('SIGTERM') // the same Ctrl-C delivered twice at once (terminal and runner): ignored
    await new Promise((r) => setTimeout(r, 1100))
    expect(served.child.exitCode).toBeNull() // still waiting on the audit trail
    const started = performance.now()
    served.child.kill('SIGTERM')
    expect(await served.exited).toBe(1)
    expect(performance.now() - started).toBeLessThan(2000)
    expect(served.stderr()).toContain('second signal during shutdown')
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
    expect(lines.map((l) => JSON.parse(l)).map((e: { decision: string; status: number }) => [e.decision, e.status])).toEqual([
      ['allow', 200],
      ['unauthorized', 401],
    ])
    for (const line of served.stderr().trimEnd().split('\n')) expect(() => JSON.parse(line)).not.toThrow()
  })
})
