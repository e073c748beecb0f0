import {
  createReadStream,
  closeSync,
  existsSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs'
import { dirname } from 'node:path'
import { createInterface } from 'node:readline'
import { WardlineError, describeError } from '../errors'
import { type AuditEntry, toJsonLines } from './entry'

export interface ReplayHooks {
  /**
   * True when `err`, from writing ONE entry alone, means that entry can never be written (the sink
   * refuses its data), as opposed to the sink being down. Such entries are quarantined.
   */
  readonly isRejection?: (err: unknown) => boolean
  /** Hears of each line moved to the quarantine file (`rejectedPath`), with why. */
  readonly onRejected?: (line: string, why: string) => void
}

/**
 * The local file audit entries go to while their sink (Postgres) keeps failing, replayed once it is
 * back (docs/principles.md, "Nothing is executed unaudited": a database outage or a SIGTERM loses no entry).
 *
 * One process owns one spill file (give each replica its own audit.spill_file). Appends go to
 * `path`; a replay first renames it to `path.replaying`, so entries spilled while the replay runs land
 * in a fresh `path` and are never read half-written or deleted unreplayed. A replay that fails keeps
 * `.replaying` and resumes from its start next time: the Postgres sink ignores request_ids it already
 * has, so replaying an entry twice is harmless. Appends are fsynced: a spilled entry survives a crash.
 *
 * A replay streams the file (one batch in memory at a time, whatever the file's size). A line that is
 * not an entry (torn by a crash) or that the sink refuses on its own (isRejection) is moved to the
 * quarantine file `path.rejected` and the replay goes on: one bad line never blocks the backlog.
 *
 * Appends are synchronous on purpose: they are rare (only during an outage), small (one batch), and
 * doing them in one tick means an append and a rename can never interleave.
 */
export class AuditSpill {
  readonly replayingPath: string
  readonly rejectedPath: string
  /**
   * How far a failed replay got through the `.replaying` file (by inode), so the next try in this
   * process skips what was written and does not quarantine the same line twice.
   */
  private progress: ReplayProgress | null = null

  constructor(readonly path: string) {
    this.replayingPath = `${path}.replaying`
    this.rejectedPath = `${path}.rejected`
  }

  /**
   * A spill file that turns out unwritable only during an outage loses the entries it was for, so
   * startup proves it can create and append to it (without writing anything into it).
   */
  static open(path: string): AuditSpill {
    try {
      mkdirSync(dirname(path), { recursive: true })
      closeSync(openSync(path, 'a', 0o600))
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? describeError(err)
      throw new WardlineError('WL_CONFIG_INVALID', `audit.spill_file: cannot open ${path} for appending (${code})`, { cause: err })
    }
    return new AuditSpill(path)
  }

  /** True when some spilled entries have not been replayed yet. */
  get hasEntries(): boolean {
    return nonEmpty(this.path) || nonEmpty(this.replayingPath)
  }

  append(entries: readonly AuditEntry[]): void {
    const text = toJsonLines(entries)
    appendLines(this.path, text)
  }

  /**
   * Hands every spilled entry to `write` in batches, oldest first, and deletes what was written. Returns
   * how many entries were replayed; rejects (keeping the file) when `write` fails for a reason other
   * than a rejected entry.
   */
  async replay(write: (batch: AuditEntry[]) => Promise<void>, batchSize: number, hooks: ReplayHooks = {}): Promise<number> {
    let replayed = 0
    for (;;) {
      if (!existsSync(this.replayingPath)) {
        if (!existsSync(this.path)) return replayed
        renameSync(this.path, this.replayingPath)
      }
      const ino = statSync(this.replayingPath).ino
      if (this.progress?.ino !== ino) this.progress = { ino, done: 0, quarantined: 0 }
      const progress = this.progress
      const input = createReadStream(this.replayingPath, { encoding: 'utf8' })
      const lines = createInterface({ input, crlfDelay: Infinity })
      try {
        let batch: Spilled[] = []
        let n = 0
        // The async iterator pauses the stream (past 1 024 lines buffered) while a batch is being
        // written: memory stays bounded whatever the file's size.
        for await (const line of lines) {
          n++
          if (n <= progress.done || line.length === 0) continue
          const entry = parseEntry(line)
          if (entry === null) {
            // Lines are handled in order (ReplayProgress.quarantined relies on it): the batch before
            // this line goes first, so a line of it the sink refuses is quarantined before this one.
            if (batch.length > 0) {
              replayed += await this.writeBatch(progress, batch, write, hooks)
              progress.done = n - 1
              batch = []
            }
            this.quarantine(progress, n, line, 'not an audit entry (a line torn by a crash?)', hooks)
            continue
          }
          batch.push({ entry, line, n })
          if (batch.length >= batchSize) {
            replayed += await this.writeBatch(progress, batch, write, hooks)
            progress.done = n
            batch = []
          }
        }
        if (batch.length > 0) replayed += await this.writeBatch(progress, batch, write, hooks)
      } finally {
        lines.close()
        input.destroy()
      }
      unlinkSync(this.replayingPath)
      this.progress = null
    }
  }

  /**
   * Writes one batch. When the sink refuses it for its data, writes the entries one by one to find
   * the culprits, quarantines those, and goes on; any other failure (the sink is down) rejects.
   */
  private async writeBatch(
    progress: ReplayProgress,
    batch: Spilled[],
    write: (batch: AuditEntry[]) => Promise<void>,
    hooks: ReplayHooks,
  ): Promise<number> {
    try {
      await write(batch.map((s) => s.entry))
      return batch.length
    } catch (err) {
      if (!hooks.isRejection?.(err)) throw err
    }
    let written = 0
    for (const s of batch) {
      try {
        await write([s.entry])
        written++
      } catch (err) {
        if (!hooks.isRejection?.(err)) throw err
        this.quarantine(progress, s.n, s.line, `refused by the sink: ${describeError(err)}`, hooks)
      }
    }
    return written
  }

  /** Moves line `n` to the quarantine file, unless an earlier try of this replay already did. */
  private quarantine(progress: ReplayProgress, n: number, line: string, why: string, hooks: ReplayHooks): void {
    if (n <= progress.quarantined) return
    appendLines(this.rejectedPath, line + '\n')
    progress.quarantined = n
    hooks.onRejected?.(line, why)
  }
}

interface ReplayProgress {
  readonly ino: number
  /** Lines 1..done are written or quarantined. */
  done: number
  /** The last line number moved to the quarantine file (lines are handled in order). */
  quarantined: number
}

interface Spilled {
  readonly entry: AuditEntry
  readonly line: string
  /** Line number in the file, from 1. */
  readonly n: number
}

/** The entry on a spill line, or null when the line is not a JSON object (the sink judges the fields). */
function parseEntry(line: string): AuditEntry | null {
  try {
    const value: unknown = JSON.parse(line)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as AuditEntry) : null
  } catch {
    return null
  }
}

/**
 * Appends `text` (whole lines) to `path` and fsyncs. If the file does not end with a newline (an
 * append torn by a crash), a newline goes first, so the torn line stays a line of its own instead
 * of gluing onto the first new entry and taking it down with it.
 */
function appendLines(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true })
  const fd = openSync(path, 'a+', 0o600)
  try {
    const size = fstatSync(fd).size
    if (size > 0) {
      const last = Buffer.alloc(1)
      readSync(fd, last, 0, 1, size - 1)
      if (last[0] !== 0x0a) text = '\n' + text
    }
    writeSync(fd, text)
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

function nonEmpty(path: string): boolean {
  try {
    return statSync(path).size > 0
  } catch {
    return false
  }
}
