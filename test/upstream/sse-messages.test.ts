import { SseMessages } from '../../src/upstream/sse-messages'

/** Upper-cases every event's data: a rewrite that shows which events were read and how. */
const upper = (data: string): string => data.toUpperCase()

/** Feeds `chunks` one by one and returns everything sent, then the end of the stream. */
function run(chunks: readonly Buffer[], rewrite = upper, max = 1024): string {
  const reader = new SseMessages(rewrite, max)
  const out: Buffer[] = chunks.map((c) => reader.push(c))
  const rest = reader.end()
  if (rest !== null) out.push(rest)
  return Buffer.concat(out).toString('utf8')
}

// LF, CRLF and CR line ends, a comment, an event without data, multi-line data, a multi-byte character.
const STREAM =
  ': keep-alive\n\n' +
  'id: 1\r\nevent: message\r\ndata: {"a":1}\r\n\r\n' +
  'retry: 500\r\r' +
  'data: first\rdata: é second\r\r' +
  'data: last\n\n'

const EXPECTED =
  ': keep-alive\n\n' + 'id: 1\nevent: message\ndata: {"A":1}\n\n' + 'retry: 500\r\r' + 'data: FIRST\ndata: É SECOND\n\n' + 'data: LAST\n\n'

describe('reading an SSE answer event by event', () => {
  test('events are read and rewritten whatever the line ends; events without data pass as they came', () => {
    expect(run([Buffer.from(STREAM)])).toBe(EXPECTED)
  })

  test('split at any byte (inside a CRLF, a multi-byte character, a blank line), the stream reads the same', () => {
    const bytes = Buffer.from(STREAM)
    for (let at = 1; at < bytes.length; at++) {
      expect([at, run([bytes.subarray(0, at), bytes.subarray(at)])]).toEqual([at, EXPECTED])
    }
    expect(run([...bytes].map((b) => Buffer.from([b])))).toBe(EXPECTED)
  })

  test('an event whose data comes back unchanged is sent as its original bytes', () => {
    const stream = 'event: message\r\ndata:{"x":1}\r\n\r\n'
    expect(run([Buffer.from(stream)], (d) => d)).toBe(stream)
  })

  test('a complete event is sent before the stream ends; an incomplete one waits, and goes out as it came at the end', () => {
    const reader = new SseMessages(upper, 1024)
    expect(reader.push(Buffer.from('data: one\n\ndata: tw')).toString()).toBe('data: ONE\n\n')
    expect(reader.push(Buffer.from('o')).toString()).toBe('')
    expect(reader.end()?.toString()).toBe('data: two')
  })

  test('a blank line that is the last byte of the stream (a CR) still completes its event', () => {
    expect(run([Buffer.from('data: x\r'), Buffer.from('\r')])).toBe('data: X\n\n')
  })

  test('an event longer than the bound throws, however it was split', () => {
    const reader = new SseMessages(upper, 16)
    expect(() => {
      for (let i = 0; i < 20; i++) reader.push(Buffer.from('d'))
    }).toThrow(/passed 16 bytes/)
  })
})
