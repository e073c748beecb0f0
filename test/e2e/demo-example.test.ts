/**
 * `npm start` (examples/demo.ts) and the example MCP server run on its own (examples/mcp-server.ts), as
 * a newcomer runs them: child processes of the built scripts, judged by what they print, their exit
 * code, and, for the demo, by running the very curl lines it prints against it.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs'
import { type AddressInfo, createServer, type Server } from 'node:net'
import { join } from 'node:path'
import { ROOT, exampleScript } from '../helpers/cli'
import { tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

function run(script: string, args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [exampleScript(script), ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 20_000 },
      (err, stdout, stderr) => resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : null, stdout, stderr }),
    )
  })
}

/** A port some other process holds: a plain TCP server on port 0. */
async function occupied(): Promise<{ server: Server; port: number }> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { server, port: (server.address() as AddressInfo).port }
}

/** A port free a moment ago (the demo needs its numbers in its URLs before it starts). */
async function freePort(): Promise<number> {
  const { server, port } = await occupied()
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** The repository's wardline.yaml in a directory of its own, so the audit file it names lands there. */
function demoConfig(): string {
  const dir = tempDir('wardline-demo-')
  copyFileSync(join(ROOT, 'wardline.yaml'), join(dir, 'wardline.yaml'))
  return join(dir, 'wardline.yaml')
}

const held: Server[] = []
const children: ChildProcess[] = []
afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL')
  for (const server of held.splice(0)) await new Promise<void>((resolve) => server.close(() => resolve()))
})

describe('the example MCP server on its own', () => {
  test('--help prints its flags, modes and defaults and exits 0 without listening', async () => {
    const r = await run('mcp-server', ['--help'])
    expect(r.code).toBe(0)
    for (const text of [
      '--port <n>',
      'default 3001',
      '--host <address>',
      'default 127.0.0.1',
      'stateful',
      'stateless-json',
      'stateless-sse',
      '/sse',
    ])
      expect(r.stdout).toContain(text)
    expect(r.stdout).toContain('WARDLINE_UPSTREAM')
  })

  test('a busy --port is one line naming the address and the flag to change, exit 1, no stack trace', async () => {
    const busy = await occupied()
    held.push(busy.server)
    const r = await run('mcp-server', ['--port', String(busy.port)])
    expect(r.code).toBe(1)
    expect(r.stderr.trim()).toBe(
      `example MCP server failed to start: --host/--port 127.0.0.1:${busy.port} is already in use (another process listens there): pass another --port or --host (or stop what listens there)`,
    )
  })

  test('a bad argument names itself and exits 2 before listening', async () => {
    for (const args of [['--port', 'x'], ['--mode', 'stateles'], ['--verbose', '1'], ['--port']]) {
      const r = await run('mcp-server', args)
      expect(r.code).toBe(2)
      expect(r.stderr).toContain(args[0])
      expect(r.stderr).toContain('usage: node dist/examples/mcp-server.js')
    }
  })
})

describe('npm start (examples/demo.ts)', () => {
  test('--help names the variables it and wardline.yaml read, and exits 0 without starting', async () => {
    const r = await run('demo', ['--help'])
    expect(r.code).toBe(0)
    for (const name of ['WARDLINE_CONFIG', 'WARDLINE_EXAMPLE_MODE', 'WARDLINE_UPSTREAM', 'WARDLINE_LISTEN', 'WARDLINE_JWT_SECRET'])
      expect(r.stdout).toContain(name)
  })

  test("the example server's port busy: the gateway's own listen message for the upstream key, naming WARDLINE_UPSTREAM, exit 1", async () => {
    const busy = await occupied()
    held.push(busy.server)
    const config = demoConfig()
    const r = await run('demo', [], {
      WARDLINE_CONFIG: config,
      WARDLINE_UPSTREAM: `http://127.0.0.1:${busy.port}`,
      WARDLINE_LISTEN: `127.0.0.1:${await freePort()}`,
    })
    expect(r.code).toBe(1)
    expect(r.stderr.trim()).toBe(
      `wardline demo: the example MCP server cannot start: upstream 127.0.0.1:${busy.port} is already in use (another process listens there): ` +
        `change upstream in ${config} (the file reads it from WARDLINE_UPSTREAM: set that variable or edit the key)`,
    )
  })

  test("the gateway's port busy: its WL_LISTEN_FAILED record naming WARDLINE_LISTEN, exit 1", async () => {
    const busy = await occupied()
    held.push(busy.server)
    const r = await run('demo', [], {
      WARDLINE_CONFIG: demoConfig(),
      WARDLINE_UPSTREAM: `http://127.0.0.1:${await freePort()}`,
      WARDLINE_LISTEN: `127.0.0.1:${busy.port}`,
    })
    expect(r.code).toBe(1)
    expect(r.stderr).toContain(`listen 127.0.0.1:${busy.port} is already in use (another process listens there)`)
    expect(r.stderr).toContain('WARDLINE_LISTEN')
    expect(r.stderr).not.toContain("Unhandled 'error' event")
  })

  test('an unknown WARDLINE_EXAMPLE_MODE or an argument is refused, naming what it takes', async () => {
    const mode = await run('demo', [], { WARDLINE_CONFIG: demoConfig(), WARDLINE_EXAMPLE_MODE: 'statefull' })
    expect(mode.code).toBe(1)
    expect(mode.stderr).toContain('WARDLINE_EXAMPLE_MODE=statefull: must be one of stateful, stateless-json, stateless-sse')
    const arg = await run('demo', ['--port', '1'])
    expect(arg.code).toBe(1)
    expect(arg.stderr).toContain('unexpected argument --port')
  })

  for (const mode of ['stateless-json', 'stateful', 'stateless-sse']) {
    test(`WARDLINE_EXAMPLE_MODE=${mode}: the curl lines it prints, run as printed, call echo and list the tools`, async () => {
      const config = demoConfig()
      const child = spawn(process.execPath, [exampleScript('demo')], {
        env: {
          PATH: process.env.PATH ?? '',
          WARDLINE_CONFIG: config,
          WARDLINE_EXAMPLE_MODE: mode,
          WARDLINE_UPSTREAM: `http://127.0.0.1:${await freePort()}`,
          WARDLINE_LISTEN: `127.0.0.1:${await freePort()}`,
        },
      })
      children.push(child)
      let stderr = ''
      child.stderr?.on('data', (c: Buffer) => (stderr += c.toString('utf8')))
      await waitFor(() => stderr.includes('Ctrl-C stops both servers'), { timeoutMs: 20_000, what: `the demo's curl lines:\n${stderr}` })
      const lines = stderr.split('\n')
      const commands = lines.slice(
        lines.findIndex((l) => l.startsWith('Try it')) + 1,
        lines.findIndex((l) => l.startsWith('Every decision')),
      )
      expect(commands.length).toBeGreaterThan(3)
      const script = join(tempDir(), 'try.sh')
      writeFileSync(script, `set -eu\n${commands.join('\n')}\n`)
      const r = await new Promise<Run>((resolve) =>
        execFile('bash', [script], { timeout: 20_000 }, (err, stdout, stderrOut) =>
          resolve({ code: err === null ? 0 : 1, stdout, stderr: stderrOut }),
        ),
      )
      expect(r.code).toBe(0)
      expect(r.stdout).not.toContain('error')
      expect(r.stdout).toMatch(/"result":\{"content":\[\{"type":"text","text":"hello"\}\]\}.*"id":1/)
      expect(r.stdout).toMatch(/"result":\{"tools":\[\{"name":"echo"/)
      // What the operator sees in the audit trail: the call allowed, as alice of tenant acme.
      const audit = join(config, '..', 'audit.jsonl')
      await waitFor(() => readFileSync(audit, 'utf8').includes('"tools/list"'), { timeoutMs: 10_000, what: 'the audit entries' })
      const entries = readFileSync(audit, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { method?: string; decision?: string; identity?: string; tenant?: string; tool?: string })
      expect(entries.filter((e) => e.method === 'tools/call')).toEqual([
        expect.objectContaining({ decision: 'allow', identity: 'alice', tenant: 'acme', tool: 'echo' }),
      ])
    })
  }
})
