/**
 * The one way tests run the wardline CLI: `node dist/src/main.js …` in a child process, as an operator
 * runs it, but from a private dist/ that this module compiles from src/ the first time a test file
 * asks for it.
 *
 * Why not the checkout's dist/: it is only as fresh as the last `npm run build`, so a test could pass
 * on code that no longer exists (or fail on code already fixed), and rebuilding it from a test races
 * with the other test files and sessions that run it. Why not tsc: it takes ~8 s and type-checks the
 * whole tree; swc (the compiler jest already uses) turns the ~70 files of src/ into JavaScript in
 * ~50 ms, one file at a time, so what runs is always the source as it is now, even while another
 * area's work in progress has type errors (`npx tsc --noEmit` is the type gate, not these tests).
 * The copy keeps dist/'s layout (dist/src/*.js beside a package.json, node_modules linked), so paths
 * that main.js resolves from its own place, such as `require('../../package.json')`, work unchanged.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process'
import { copyFileSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { type AddressInfo, createServer } from 'node:net'
import { dirname, join, relative } from 'node:path'
import { transformFileSync } from '@swc/core'
import yaml from 'js-yaml'
import { tempDir } from './harness'

export const ROOT = join(__dirname, '..', '..')

let builtMain: string | null = null

/** Compiles src/ and examples/ into a fresh private build (once per test file) and returns its dist/src/main.js. */
function main(): string {
  if (builtMain !== null) return builtMain
  const out = tempDir('wardline-cli-')
  const compile = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) compile(path)
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
        const target = join(out, 'dist', relative(ROOT, path)).replace(/\.ts$/, '.js')
        mkdirSync(dirname(target), { recursive: true })
        const { code } = transformFileSync(path, {
          jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
          module: { type: 'commonjs' },
          swcrc: false,
        })
        writeFileSync(target, code)
      }
    }
  }
  compile(join(ROOT, 'src'))
  compile(join(ROOT, 'examples'))
  copyFileSync(join(ROOT, 'package.json'), join(out, 'package.json'))
  symlinkSync(join(ROOT, 'node_modules'), join(out, 'node_modules'), 'dir')
  builtMain = join(out, 'dist', 'src', 'main.js')
  return builtMain
}

/** An example's built script, dist/examples/<name>.js (`mcp-server`, `demo`), compiled with src/. */
export function exampleScript(name: string): string {
  return join(dirname(dirname(main())), 'examples', `${name}.js`)
}

/** The built main.js, for a test that spawns the CLI itself (its own stdio: a pipe closed early, say). */
export function cliMain(): string {
  return main()
}

const ENV = { ...process.env, NO_COLOR: '1' }

/** Runs `wardline <args>` to its end. */
export function runCli(args: readonly string[], cwd = ROOT): { code: number; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [main(), ...args], { cwd, encoding: 'utf8', env: ENV, timeout: 20_000 })
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr }
}

export interface Served {
  readonly child: ChildProcessWithoutNullStreams
  readonly port: number
  /** http://host:port from the "wardline listening" log line. */
  readonly url: string
  stdout(): string
  stderr(): string
  /** The exit code (null when killed by a signal). */
  readonly exited: Promise<number | null>
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>
}

/** Every `serve` child still running, for killServed() in an afterEach/afterAll. */
const running = new Set<ChildProcessWithoutNullStreams>()

/** Kills every `serve` child a test left running (a test that failed early): an orphan keeps jest from exiting. */
export function killServed(): void {
  for (const child of running) child.kill('SIGKILL')
}

/**
 * Starts `wardline serve --config <file>` (listen on port 0) and resolves once it logged its listening
 * address; rejects with its stderr if it exits first or has not listened within 20 s. `nodeArgs` go to
 * node before the script (`--require` a module that injects a fault).
 */
export async function startServe(configFile: string, nodeArgs: readonly string[] = []): Promise<Served> {
  const child = spawn(process.execPath, [...nodeArgs, main(), 'serve', '--config', configFile], { cwd: ROOT, env: ENV })
  running.add(child)
  let out = ''
  let err = ''
  child.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')))
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      running.delete(child)
      resolve(code)
    }),
  )
  const listen = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`wardline serve did not listen within 20 s:\n${err}`))
    }, 20_000)
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString('utf8')
      const address = listeningAddress(err)
      if (address !== null) {
        clearTimeout(timer)
        resolve(address)
      }
    })
    void exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`wardline serve exited ${code} before listening:\n${err}`))
    })
  })
  return {
    child,
    port: Number(listen.slice(listen.lastIndexOf(':') + 1)),
    url: `http://${listen}`,
    stdout: () => out,
    stderr: () => err,
    exited,
    stop: (signal = 'SIGTERM') => {
      child.kill(signal)
      return exited
    },
  }
}

/** The JSON log records of a serve child's stderr (lines that are not JSON, such as Node's warnings, left out). */
export function logRecords(stderr: string): Array<Record<string, unknown>> {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
}

/** The `listen` of the "wardline listening" log line (JSON, one per line), once a complete one arrived. */
function listeningAddress(stderr: string): string | null {
  for (const line of stderr.split('\n').slice(0, -1)) {
    let record: { message?: unknown; listen?: unknown } | null
    try {
      record = JSON.parse(line) as typeof record
    } catch {
      continue // not a log record (a Node warning, say)
    }
    if (record?.message === 'wardline listening' && typeof record.listen === 'string') return record.listen
  }
  return null
}

/**
 * One config file per replica name in `dir` (`<name>.yaml`): `tree` plus what must differ between
 * replicas: a port of their own and their own JSONL audit and spill file (`<name>.jsonl`,
 * `<name>-spill.jsonl`). Returns the files, in the order of `names`, for startServe.
 */
export function writeReplicaConfigs(dir: string, names: readonly string[], tree: Record<string, unknown>): string[] {
  return names.map((name) => {
    const file = join(dir, `${name}.yaml`)
    const audit = { output: join(dir, `${name}.jsonl`), spill_file: join(dir, `${name}-spill.jsonl`) }
    writeFileSync(file, yaml.dump({ listen: '127.0.0.1:0', ...tree, audit }))
    return file
  })
}

/** A port another listener holds, as an operator meets it (the gateway must name the key to change); `release()` frees it. */
export async function occupiedPort(): Promise<{ readonly port: number; readonly release: () => Promise<void> }> {
  const s = createServer()
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))
  return {
    port: (s.address() as AddressInfo).port,
    release: () => new Promise<void>((resolve) => s.close(() => resolve())),
  }
}

/** A port nothing listens on right now (the kernel's pick, released at once). */
export async function freePort(): Promise<number> {
  const held = await occupiedPort()
  await held.release()
  return held.port
}
