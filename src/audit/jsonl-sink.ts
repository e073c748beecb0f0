import { mkdirSync } from 'node:fs'
import { open, type FileHandle } from 'node:fs/promises'
import { dirname } from 'node:path'
import type { AuditEntry } from './entry'
import type { AuditSink } from './sink'

/** Appends one JSON object per line to a file, or to stdout (which then carries nothing else). */
export class JsonlAuditSink implements AuditSink {
  readonly name: string
  private file: FileHandle | null = null

  private constructor(private readonly path: string | 'stdout') {
    this.name = path === 'stdout' ? 'stdout' : `jsonl:${path}`
  }

  static async open(path: string | 'stdout'): Promise<JsonlAuditSink> {
    const sink = new JsonlAuditSink(path)
    if (path !== 'stdout') {
      mkdirSync(dirname(path), { recursive: true })
      // O_APPEND: every write lands at the end even if an operator's tool truncates or rotates by copy.
      sink.file = await open(path, 'a')
    }
    return sink
  }

  async write(entries: readonly AuditEntry[]): Promise<void> {
    let text = ''
    for (const e of entries) text += JSON.stringify(e) + '\n'
    if (this.file !== null) {
      await this.file.appendFile(text)
      return
    }
    await new Promise<void>((resolve, reject) => {
      process.stdout.write(text, (err) => (err ? reject(err) : resolve()))
    })
  }

  async close(): Promise<void> {
    await this.file?.close()
    this.file = null
  }
}
