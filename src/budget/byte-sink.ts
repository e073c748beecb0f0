/**
 * A growable byte buffer written from the front, kept and reused by its owner so that building a
 * short output allocates nothing: the loop breaker’s canonical arguments (canonical-json.ts).
 */
export class ByteSink {
  buf: Buffer
  length = 0

  constructor(
    private readonly initialBytes: number,
    /** A buffer grown past this is dropped at `reset`, so one huge call does not pin its size for good. */
    private readonly keptBytes: number,
  ) {
    this.buf = Buffer.allocUnsafe(initialBytes)
  }

  /** Empties it, dropping a buffer grown past keptBytes. */
  reset(): void {
    if (this.buf.length > this.keptBytes) this.buf = Buffer.allocUnsafe(this.initialBytes)
    this.length = 0
  }

  /** Room for `bytes` more without growing. */
  reserve(bytes: number): void {
    if (this.length + bytes > this.buf.length) this.grow(bytes)
  }

  byte(c: number): void {
    if (this.length === this.buf.length) this.grow(1)
    this.buf[this.length++] = c
  }

  /** Appends `src[from, to)`. */
  copy(src: Buffer, from: number, to: number): void {
    const n = to - from
    if (this.length + n > this.buf.length) this.grow(n)
    if (n < 64) {
      // Buffer#copy costs ~100 ns in its JS wrapper: a loop is cheaper for keys, numbers, literals and small objects.
      const buf = this.buf
      let at = this.length
      for (let i = from; i < to; i++) buf[at++] = src[i]
    } else {
      src.copy(this.buf, this.length, from, to)
    }
    this.length += n
  }

  /** Appends a string's UTF-8 bytes. */
  utf8(text: string): void {
    const n = Buffer.byteLength(text, 'utf8')
    if (this.length + n > this.buf.length) this.grow(n)
    this.length += this.buf.write(text, this.length, n, 'utf8')
  }

  /** Appends a safe integer in decimal, without making a string of it. */
  integer(value: number): void {
    if (value < 0) {
      this.byte(0x2d)
      value = -value
    }
    let div = 1
    while (div * 10 <= value) div *= 10
    for (; div >= 1; div /= 10) {
      const d = Math.floor(value / div)
      this.byte(0x30 + d)
      value -= d * div
    }
  }

  private grow(atLeast: number): void {
    let size = this.buf.length * 2
    while (size < this.length + atLeast) size *= 2
    const bigger = Buffer.allocUnsafe(size)
    this.buf.copy(bigger, 0, 0, this.length)
    this.buf = bigger
  }
}
