import { type ChildProcess, fork } from 'node:child_process'
import { closeSync, openSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import type { AuditSink } from '../../src/audit/sink'

interface Reply {
  readonly id?: number
  readonly ok?: boolean
  readonly ready?: boolean
  readonly name?: string
  readonly message?: string
}

/**
 * `JsonlAuditSink.open('stdout')` running in a child process whose stdout is the file at `outputPath`
 * (what `wardline serve > audit.jsonl` gives it), seen from here through the AuditSink port: each call
 * is sent over IPC and settles when the real sink's call settled in the child. The test's own stdout
 * (jest's) is left alone, and the bytes the sink wrote can be read back from the file.
 */
export class StdoutSinkProcess implements AuditSink {
  private nextId = 1
  private readonly waiting = new Map<number, (reply: Reply) => void>()

  private constructor(
    private readonly child: ChildProcess,
    readonly name: string,
  ) {
    child.on('message', (reply: Reply) => {
      if (reply.id === undefined) return
      this.waiting.get(reply.id)?.(reply)
      this.waiting.delete(reply.id)
    })
    child.on('exit', () => {
      for (const w of this.waiting.values()) w({ ok: false, message: 'sink process exited' })
      this.waiting.clear()
    })
  }

  static async start(outputPath: string): Promise<StdoutSinkProcess> {
    const fd = openSync(outputPath, 'a')
    let child: ChildProcess
    try {
      child = fork(join(__dirname, 'stdout-sink-process.js'), [], { stdio: ['ignore', fd, 'inherit', 'ipc'] })
    } finally {
      closeSync(fd) // the child holds its own copy
    }
    const hello = await new Promise<Reply>((resolve, reject) => {
      child.once('message', resolve)
      child.once('exit', (code) => reject(new Error(`stdout sink process exited (${code}) before it was ready`)))
    })
    if (!hello.ready) throw new Error(`stdout sink process failed to open its sink: ${hello.message}`)
    return new StdoutSinkProcess(child, hello.name as string)
  }

  write(entries: readonly AuditEntry[]): Promise<void> {
    return this.call('write', entries)
  }

  reopen(): void {
    // IPC keeps message order, so the next write runs after this reopen in the child.
    void this.call('reopen').catch(() => undefined)
  }

  close(): Promise<void> {
    return this.call('close')
  }

  /** Ends the child process. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()))
    this.child.disconnect()
    await exited
  }

  private call(op: string, entries?: readonly AuditEntry[]): Promise<void> {
    const id = this.nextId++
    return new Promise<void>((resolve, reject) => {
      this.waiting.set(id, (reply) => (reply.ok ? resolve() : reject(new Error(reply.message))))
      this.child.send({ id, op, entries })
    })
  }
}
