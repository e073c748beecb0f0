import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs'
import { dirname } from 'node:path'
import type { AuditEntry } from './entry'

/**
 * The local file audit entries go to while their sink (Postgres) keeps failing, replayed once it is
 * back (DESIGN.md "Storage": nothing is lost on a database outage or on SIGTERM).
 *
 * One process owns one spill file (give each replica its own audit.spill_file). Appends go to
 * `path`; a replay first renames it to `path.replaying`, so entries spilled while the replay runs land
 * in a fresh `path` and are never read half-written or deleted unreplayed. A replay that fails keeps
 * `.replaying` and resumes from its start next time: the Postgres sink ignores request_ids it already
 * has, so replaying an entry twice is harmless. Appends are fsynced: a spilled entry survives a crash.
 *
 * The file operations are synchronous on purpose: they are rare (only during an outage), small
 * (one batch), and doing them in one tick means an append and a rename can never interleave.
 */
export class AuditSpill {
  readonly replayingPath: string

  constructor(readonly path: string) {
    this.replayingPath = `${path}.replaying`
  }

  /** True when some spilled entries have not been replayed yet. */
  get hasEntries(): boolean {
    return nonEmpty(this.path) || nonEmpty(this.replayingPath)
  }

  append(entries: readonly AuditEntry[]): void {
    let text = ''
    for (const e of entries) text += JSON.stringify(e) + '\n'
    mkdirSync(dirname(this.path), { recursive: true })
    const fd = openSync(this.path, 'a', 0o600)
    try {
      writeSync(fd, text)
      fsyncSync(fd)
    } finally {
      closeSync(fd)
    }
  }

  /**
   * Hands every spilled entry to `write` in batches, oldest first, and deletes what was written. Returns
   * how many entries were replayed; rejects (keeping the file) when `write` does. `onBadLine` hears of
   * lines that are not JSON (a line torn by a crash mid-append), which are skipped.
   */
  async replay(write: (batch: AuditEntry[]) => Promise<void>, batchSize: number, onBadLine?: (line: string) => void): Promise<number> {
    let replayed = 0
    for (;;) {
      if (!existsSync(this.replayingPath)) {
        if (!existsSync(this.path)) return replayed
        renameSync(this.path, this.replayingPath)
      }
      const entries = parse(readFileSync(this.replayingPath, 'utf8'), onBadLine)
      for (let at = 0; at < entries.length; at += batchSize) await write(entries.slice(at, at + batchSize))
      unlinkSync(this.replayingPath)
      replayed += entries.length
    }
  }
}

function parse(text: string, onBadLine?: (line: string) => void): AuditEntry[] {
  const out: AuditEntry[] = []
  for (const line of text.split('\n')) {
    if (line.length === 0) continue
    try {
      out.push(JSON.parse(line) as AuditEntry)
    } catch {
      onBadLine?.(line)
    }
  }
  return out
}

function nonEmpty(path: string): boolean {
  try {
    return statSync(path).size > 0
  } catch {
    return false
  }
}
