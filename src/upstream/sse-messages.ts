/**
 * Reads an SSE stream event by event (WHATWG HTML §9.2.6: lines end in CRLF, LF or CR; a blank line
 * ends an event; `data:` lines join with LF into the event's data) and passes each event's data through
 * `rewrite`. An event whose data comes back unchanged (the same string) is sent as its original bytes;
 * a changed one is sent with its other lines (id, event, retry, comments) as they were and the new
 * data in place of the old `data:` lines. Only the event being received is held, never the stream: a
 * server's request to the client (sampling, elicitation) reaches the client while the stream stays open.
 */
export class SseMessages {
  /** The bytes received of the event not yet complete, as they came (joined once, when it completes). */
  private chunks: Buffer[] = []
  private held = 0
  /** True while the current line has no byte yet: a line end now is a blank line, which ends the event. */
  private lineEmpty = true
  /** The last byte was a CR: a LF right after it belongs to the same line end (CRLF). */
  private afterCR = false
  /** That CR ended the event: it is cut after the CR, or after the LF that follows. */
  private endsAfterCR = false
  /** No event completed yet: the stream's first event may begin with a byte order mark, which clients drop. */
  private first = true

  constructor(
    private readonly rewrite: (data: string) => string,
    /** Longest event held; a longer one makes `push` throw (the caller ends the stream). */
    private readonly maxEventBytes: number,
  ) {}

  /**
   * Returns the bytes to send now (complete events), possibly empty. Each byte is looked at once, and
   * an event's chunks are joined once, however many pushes it took to arrive.
   */
  push(chunk: Buffer): Buffer {
    const out: Buffer[] = []
    let from = 0 // start of the bytes of `chunk` not yet part of an event sent
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i]
      if (this.afterCR) {
        this.afterCR = false
        if (this.endsAfterCR) {
          this.endsAfterCR = false
          const end = c === LF ? i + 1 : i
          out.push(this.complete(chunk.subarray(from, end)))
          from = end
          if (c === LF) continue
        } else if (c === LF) continue
      }
      if (c !== LF && c !== CR) {
        this.lineEmpty = false
        continue
      }
      if (c === CR) this.afterCR = true
      if (!this.lineEmpty) {
        this.lineEmpty = true
        continue
      }
      // A blank line: the event ends here (after a CR, once the next byte says whether a LF follows).
      if (c === CR) this.endsAfterCR = true
      else {
        out.push(this.complete(chunk.subarray(from, i + 1)))
        from = i + 1
      }
    }
    if (from < chunk.length) {
      this.chunks.push(chunk.subarray(from))
      this.held += chunk.length - from
      if (this.held > this.maxEventBytes) {
        throw new Error(`an SSE event of the answer passed ${this.maxEventBytes} bytes before it ended`)
      }
    }
    return out.length === 1 ? out[0] : Buffer.concat(out)
  }

  /**
   * The stream ended. An event whose blank line was its last byte (a CR) is complete; anything else
   * left is an incomplete event, dispatched by no client, so it is sent as it came.
   */
  end(): Buffer | null {
    if (this.endsAfterCR) {
      this.endsAfterCR = false
      return this.complete(Buffer.alloc(0))
    }
    if (this.held === 0) return null
    const rest = Buffer.concat(this.chunks)
    this.chunks = []
    this.held = 0
    return rest
  }

  /** The event made of the bytes held so far and `last`, passed through `rewrite`. */
  private complete(last: Buffer): Buffer {
    const raw = this.held === 0 ? last : Buffer.concat([...this.chunks, last])
    this.chunks = []
    this.held = 0
    return this.event(raw)
  }

  private event(raw: Buffer): Buffer {
    let text = raw.toString('utf8')
    // WHATWG §9.2.6: the decoder strips one leading BOM of the stream, so `\uFEFFdata: …` is a data line.
    if (this.first) {
      this.first = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    const lines = text.split(LINE_END)
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
    let out = ''
    let placed = false
    for (const line of lines) {
      if (dataValue(line) === null) out += `${line}\n`
      else if (!placed) {
        placed = true
        for (const part of rewritten.split(LINE_END)) out += `data: ${part}\n`
      }
    }
    return Buffer.from(`${out}\n`)
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
