/**
 * Reads an SSE stream event by event (WHATWG HTML §9.2.6: lines end in CRLF, LF or CR; a blank line
 * ends an event; `data:` lines join with LF into the event's data) and passes each event's data through
 * `rewrite`. An event whose data comes back unchanged (the same string) is sent as its original bytes;
 * a changed one is sent with its other lines (id, event, retry, comments) as they were and the new
 * data in place of the old `data:` lines. Only the event being received is held, never the stream: a
 * server's request to the client (sampling, elicitation) reaches the client while the stream stays open.
 */
export class SseMessages {
  private pending: Buffer | null = null

  constructor(
    private readonly rewrite: (data: string) => string,
    /** Longest event held; a longer one makes `push` throw (the caller ends the stream). */
    private readonly maxEventBytes: number,
  ) {}

  /** Returns the bytes to send now (complete events), possibly empty. */
  push(chunk: Buffer): Buffer {
    const buffer = this.pending === null ? chunk : Buffer.concat([this.pending, chunk])
    const out: Buffer[] = []
    let eventStart = 0
    let lineStart = 0
    let i = 0
    while (i < buffer.length) {
      const c = buffer[i]
      if (c !== LF && c !== CR) {
        i++
        continue
      }
      // CR at the very end: it may be the first half of a CRLF; decide when more arrives.
      if (c === CR && i + 1 === buffer.length) break
      const end = c === CR && buffer[i + 1] === LF ? i + 2 : i + 1
      if (i === lineStart) {
        out.push(this.event(buffer.subarray(eventStart, end)))
        eventStart = end
      }
      lineStart = end
      i = end
    }
    this.pending = eventStart < buffer.length ? Buffer.from(buffer.subarray(eventStart)) : null
    if (this.pending !== null && this.pending.length > this.maxEventBytes) {
      throw new Error(`an SSE event of the answer passed ${this.maxEventBytes} bytes before it ended`)
    }
    return out.length === 1 ? out[0] : Buffer.concat(out)
  }

  /** The stream ended: an event left incomplete is dispatched by no client, so it is sent as it came. */
  end(): Buffer | null {
    const rest = this.pending
    this.pending = null
    return rest
  }

  private event(raw: Buffer): Buffer {
    const lines = raw.toString('utf8').split(LINE_END)
    // The event's last line terminator and the blank line that ended it leave empty strings at the end.
    while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop()
    let data: string | null = null
    for (const line of lines) {
      const value = dataValue(line)
      if (value !== null) data = data === null ? value : `${data}\n${value}`
    }
    if (data === null) return raw
    const rewritten = this.rewrite(data)
    if (rewritten === data) return raw
    let text = ''
    let placed = false
    for (const line of lines) {
      if (dataValue(line) === null) text += `${line}\n`
      else if (!placed) {
        placed = true
        for (const part of rewritten.split(LINE_END)) text += `data: ${part}\n`
      }
    }
    return Buffer.from(`${text}\n`)
  }
}

const LF = 0x0a
const CR = 0x0d
const LINE_END = /\r\n|\r|\n/

/** The value of a `data` field line (`data:value`, `data: value` or a bare `data`), else null. */
function dataValue(line: string): string | null {
  if (line === 'data') return ''
  if (!line.startsWith('data:')) return null
  return line.charCodeAt(5) === 0x20 ? line.slice(6) : line.slice(5)
}
