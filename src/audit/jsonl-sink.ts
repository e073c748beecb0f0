import { mkdirSync } from 'node:fs'
import { open, type FileHandle } from 'node:fs/promises'
import { dirname } from 'node:path'
import { WardlineError, describeError } from '../errors'
import { type AuditEntry, toJsonLines } from './entry'
import type { AuditSink } from './sink'

/**
 * A closed stdout (the reader of a pipe went away) emits 'error' on process.stdout; unheard, that
 * would kill the gateway. One listener for the process turns it into failed writes instead.
 */
let stdoutGuarded = false
function guardStdout(): void {
  if (stdoutGuarded) return
  stdoutGuarded = true
  process.stdout.on('error', () => undefined) // each write's callback reports its own failure
}

/** Appends one JSON object per line to a file, or to stdout (which then carries nothing else). */
export class JsonlAuditSink implements AuditSink {
  readonly name: string
  private file: FileHandle | null = null
  private closed = false
  private reopenRequested = false

  private constructor(private readonly path: string | 'stdout') {
    this.name = path === 'stdout' ? 'stdout' : `jsonl:${path}`
  }

  static async open(path: string | 'stdout'): Promise<JsonlAuditSink> {
    const sink = new JsonlAuditSink(path)
    if (path === 'stdout') {
      guardStdout()
    } else {
      try {
        mkdirSync(dirname(path), { recursive: true })
        // O_APPEND: every write lands at the end even if an operator's tool truncates or rotates by copy.
        sink.file = await open(path, 'a')
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? describeError(err)
        throw new WardlineError('WL_CONFIG_INVALID', `audit.output: cannot open ${path} for appending (${code})`, { cause: err })
      }
    }
    return sink
  }

  /**
   * After logrotate renamed the file, lines would go on into the renamed one: SIGHUP asks for a
   * reopen, done by the next write (writes are sequential, so none is in flight on the old handle).
   */
  reopen(): void {
    if (this.file !== null) this.reopenRequested = true
  }

  async write(entries: readonly AuditEntry[]): Promise<void> {
    if (this.closed) throw new Error(`audit sink ${this.name} is closed`)
    const text = toJsonLines(entries)
    if (this.file !== null) {
      if (this.reopenRequested) {
        // A failure keeps the old handle (lines still land somewhere) and the request: the next write tries again.
        const reopened = await open(this.path, 'a').catch(() => null)
        if (reopened !== null) {
          this.reopenRequested = false
          const previous = this.file
          this.file = reopened
          await previous.close()
        }
      }
      await this.file.appendFile(text)
      return
    }
    await new Promise<void>((resolve, reject) => {
      if (process.stdout.destroyed || !process.stdout.writable) {
        reject(new Error('stdout is closed'))
        return
      }
      process.stdout.write(text, (err) => (err ? reject(err) : resolve()))
    })
  }

  async close(): Promise<void> {
    this.closed = true
    await this.file?.close()
    this.file = null
  }
}
