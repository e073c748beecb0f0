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

export interface JsonlSinkOptions {
  /**
   * Opens the audit file (default fs/promises `open`). A seam for tests only: it lets a test hand the
   * sink a real FileHandle that fails one append part-way, as a full disk does, which no portable
   * unprivileged setup can produce on cue.
   */
  readonly openFile?: (path: string, flags: string) => Promise<FileHandle>
}

/**
 * 'a+': O_APPEND (every write lands at the end even if an operator's tool truncates or rotates by
 * copy), plus reading, so the sink can look at the file's last byte (see `checkTail`).
 */
const FILE_FLAGS = 'a+'

/** Appends one JSON object per line to a file, or to stdout (which then carries nothing else). */
export class JsonlAuditSink implements AuditSink {
  readonly name: string
  private file: FileHandle | null = null
  private closed = false
  private reopenRequested = false
  /**
   * Set when the file may end in a torn line: a write failed (a full disk writes part of a batch,
   * then ENOSPC), or the file is newly opened (an earlier process may have died mid-append). The next
   * write then starts on a fresh line, so the torn line stays a line of its own instead of swallowing
   * the first entry after it.
   */
  private checkTail = true
  private readonly openFile: (path: string, flags: string) => Promise<FileHandle>

  private constructor(
    /** A file to append to, or 'stdout'. */
    private readonly path: string,
    options: JsonlSinkOptions,
  ) {
    this.name = path === 'stdout' ? 'stdout' : `jsonl:${path}`
    this.openFile = options.openFile ?? open
    // stdout cannot be read back: it starts clean and gets a newline only after a failed write.
    if (path === 'stdout') this.checkTail = false
  }

  /** `path` is a file to append to (created with its directory if missing), or 'stdout'. */
  static async open(path: string, options: JsonlSinkOptions = {}): Promise<JsonlAuditSink> {
    const sink = new JsonlAuditSink(path, options)
    if (path === 'stdout') {
      guardStdout()
    } else {
      try {
        mkdirSync(dirname(path), { recursive: true })
        sink.file = await sink.openFile(path, FILE_FLAGS)
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
    let text = toJsonLines(entries)
    if (this.file !== null) {
      if (this.reopenRequested) {
        // A failure keeps the old handle (lines still land somewhere) and the request: the next write tries again.
        const reopened = await this.openFile(this.path, FILE_FLAGS).catch(() => null)
        if (reopened !== null) {
          this.reopenRequested = false
          const previous = this.file
          this.file = reopened
          this.checkTail = true
          await previous.close()
        }
      }
      try {
        if (this.checkTail && !(await endsWithNewline(this.file))) text = '\n' + text
        await writeAll(this.file, Buffer.from(text, 'utf8'))
        this.checkTail = false
      } catch (err) {
        this.checkTail = true
        throw err
      }
      return
    }
    // After a failed write to stdout part of a line may have gone out; what was written cannot be
    // read back, so the next write starts with a newline (at worst an empty line, which JSONL
    // readers skip) rather than risk gluing its first entry onto a torn one.
    if (this.checkTail) text = '\n' + text
    await new Promise<void>((resolve, reject) => {
      if (process.stdout.destroyed || !process.stdout.writable) {
        reject(new Error('stdout is closed'))
        return
      }
      process.stdout.write(text, (err) => (err ? reject(err) : resolve()))
    }).then(
      () => {
        this.checkTail = false
      },
      (err: unknown) => {
        this.checkTail = true
        throw err
      },
    )
  }

  async close(): Promise<void> {
    this.closed = true
    await this.file?.close()
    this.file = null
  }
}

/**
 * Writes every byte, however many writes it takes (a regular file takes one unless the disk fills).
 * FileHandle.write on one Buffer, not appendFile: appendFile re-encodes and loops through more
 * promises, and measured ~50% more CPU per write (74 vs 48 µs for a 13 KB batch).
 */
async function writeAll(file: FileHandle, bytes: Buffer): Promise<void> {
  let offset = 0
  while (offset < bytes.length) {
    const { bytesWritten } = await file.write(bytes, offset, bytes.length - offset)
    offset += bytesWritten
  }
}

/** True when the file is empty or its last byte is a newline; a FIFO or device cannot be read back and counts as clean. */
async function endsWithNewline(file: FileHandle): Promise<boolean> {
  const stats = await file.stat()
  const size = stats.size
  if (!stats.isFile() || size === 0) return true
  const last = Buffer.alloc(1)
  const { bytesRead } = await file.read(last, 0, 1, size - 1)
  return bytesRead === 0 || last[0] === 0x0a
}
