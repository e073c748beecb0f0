/**
 * Answers the gateway gives before it has read the request body (413 on a declared or counted body
 * over max_body_bytes, 401, 403, 429): the client must be able to read them. Closing the socket while
 * the client still writes makes the kernel reset the connection, and the client gets EPIPE or
 * ECONNRESET instead of the status; the gateway reads and discards the rest of the body first, within
 * bounds, then closes (server/linger.ts).
 *
 * Through undici's fetch (the client of the report) every status arrives on Linux loopback even
 * without that: undici reads the answer before it sees the reset. A client that sends its whole body
 * before it reads, paced like a slow uplink, is what loses it here without the lingering close.
 */
import { type Socket, connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { fetch } from 'undici'
import { MCP_HEADERS, as, startHarness, toolCall, type Harness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, gate, startRawUpstream } from './raw-upstream'

const MAX_BODY_BYTES = 256 * 1024

/** A tools/call whose JSON is `bytes` long: valid JSON-RPC, just too large. */
function largeCall(bytes: number): Buffer {
  const text = JSON.stringify(toolCall('echo', { text: '' }))
  return Buffer.from(text.replace('"text":""', `"text":"${'x'.repeat(bytes - text.length)}"`))
}

/** Far more than the sockets' buffers hold on loopback, so the client is still writing when the answer comes. */
const LARGE = largeCall(32 * MAX_BODY_BYTES)

/** The status fetch reads, or the error code it failed with (EPIPE, ECONNRESET, UND_ERR_SOCKET). */
async function statusOf(url: string, init: Parameters<typeof fetch>[1]): Promise<number | string> {
  try {
    const res = await fetch(url, init)
    await res.arrayBuffer()
    return res.status
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause
    return cause?.code ?? cause?.message ?? String(err)
  }
}

interface Upload {
  /** The error a write failed with (EPIPE, ECONNRESET: the gateway reset the connection), or null. */
  readonly writeError: string | null
  /** The status line's code the client read once it had sent everything, or null. */
  readonly status: number | null
  /** Bytes the client managed to send. */
  readonly sent: number
}

/**
 * A client that sends its whole body (`body`, or that many bytes of `x`), in `chunk`-sized pieces paced like a slow uplink, before it looks
 * at the answer (what many simple HTTP clients do). Stops at the first failed write.
 */
async function uploadThenRead(port: number, head: string, body: number | Buffer, chunk = 16 * 1024): Promise<Upload> {
  const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
  let received = ''
  let writeError: string | null = null
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()))
  socket.on('data', (d: Buffer) => (received += d.toString('latin1')))
  socket.on('error', (err: NodeJS.ErrnoException) => (writeError ??= err.code ?? err.message))
  const write = (data: Buffer | string): Promise<void> =>
    new Promise((resolve) =>
      socket.write(data, (err) => (err ? ((writeError ??= (err as NodeJS.ErrnoException).code ?? err.message), resolve()) : resolve())),
    )
  await write(head)
  const bodyBytes = typeof body === 'number' ? body : body.length
  let sent = 0
  while (sent < bodyBytes && writeError === null && !socket.destroyed) {
    const size = Math.min(chunk, bodyBytes - sent)
    await write(typeof body === 'number' ? Buffer.alloc(size, 0x78) : body.subarray(sent, sent + size))
    sent += size
    await sleep(2) // pacing, not waiting for anything: the client is still sending when the answer comes
  }
  // Sent everything: once the gateway has closed its side (after its answer), close ours.
  if (!socket.readableEnded && !socket.destroyed) await new Promise((resolve) => socket.once('end', resolve).once('close', resolve))
  socket.end()
  await closed
  const m = /^HTTP\/1\.1 (\d{3})/.exec(received)
  return { writeError, status: writeError === null && m ? Number(m[1]) : null, sent }
}

describe('early answers reach the client', () => {
  let h: Harness
  beforeAll(async () => {
    h = await startHarness({
      config: { max_body_bytes: MAX_BODY_BYTES },
    })
  })
  afterAll(async () => {
    await h.close()
  })

  test('20 POSTs with a declared body far over max_body_bytes each read their 413', async () => {
    const body = LARGE
    const statuses = await Promise.all(
      Array.from({ length: 20 }, () => statusOf(`${h.url}/mcp`, { method: 'POST', headers: { ...MCP_HEADERS, ...as('alice') }, body })),
    )
    expect(statuses).toEqual(Array(20).fill(413))
  })

  test('20 chunked POSTs over max_body_bytes (refused mid-body) each read their 413', async () => {
    const chunk = LARGE
    const statuses = await Promise.all(
      Array.from({ length: 20 }, () =>
        statusOf(`${h.url}/mcp`, {
          method: 'POST',
          headers: { ...MCP_HEADERS, ...as('alice') },
          // A stream: no Content-Length, so the cap is found while reading.
          body: new ReadableStream({
            start(controller) {
              controller.enqueue(chunk)
              controller.close()
            },
          }),
          duplex: 'half',
        }),
      ),
    )
    expect(statuses).toEqual(Array(20).fill(413))
  })

  test('a client that sends its whole body before reading reads its 413, 401 and 403: the gateway read the rest instead of resetting', async () => {
    const port = Number(new URL(h.url).port)
    const bytes = Math.floor(1.5 * MAX_BODY_BYTES) // within the 2 × max_body_bytes the gateway reads after an early answer
    const post = (headers: string): string =>
      `POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${bytes}\r\nconnection: close\r\n${headers}\r\n`
    const uploads = await Promise.all([
      uploadThenRead(port, post('x-wardline-identity: alice\r\n'), bytes),
      uploadThenRead(port, post(''), bytes),
      uploadThenRead(port, post('x-wardline-identity: alice\r\norigin: https://evil.example\r\n'), bytes),
    ])
    expect(uploads).toEqual([
      { writeError: null, status: 413, sent: bytes },
      { writeError: null, status: 401, sent: bytes },
      { writeError: null, status: 403, sent: bytes },
    ])
  })

  test('a body that goes on past twice max_body_bytes is not read to its end: the gateway stops reading and closes', async () => {
    const read: number[] = []
    const onConnection = (socket: Socket): void => void socket.on('close', () => read.push(socket.bytesRead))
    h.gateway.server.on('connection', onConnection)
    try {
      const port = Number(new URL(h.url).port)
      const endless = 1024 * 1024 * 1024 // announced, never sent in full
      const upload = await uploadThenRead(
        port,
        `POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${endless}\r\nx-wardline-identity: alice\r\n\r\n`,
        endless,
        256 * 1024,
      )
      // The gateway closed the connection under the client (after its read bound, then its time bound).
      expect(upload.writeError).not.toBeNull()
      expect(upload.sent).toBeLessThan(endless)
      await waitFor(() => read.length > 0, { what: 'the gateway side of the connection to close' })
      // 2 × max_body_bytes, plus what sat in Node's buffers when it stopped reading.
      expect(read[0]).toBeLessThan(3 * MAX_BODY_BYTES)
    } finally {
      h.gateway.server.off('connection', onConnection)
    }
  })

  test('a large body without credentials reads its 401', async () => {
    const body = LARGE
    const statuses = await Promise.all(
      Array.from({ length: 10 }, () => statusOf(`${h.url}/mcp`, { method: 'POST', headers: MCP_HEADERS, body })),
    )
    expect(statuses).toEqual(Array(10).fill(401))
  })

  test('a large body from an origin not allowed reads its 403', async () => {
    const body = LARGE
    const headers = { ...MCP_HEADERS, ...as('alice'), origin: 'https://evil.example' }
    const statuses = await Promise.all(Array.from({ length: 10 }, () => statusOf(`${h.url}/mcp`, { method: 'POST', headers, body })))
    expect(statuses).toEqual(Array(10).fill(403))
  })
})

describe('a 429 from the concurrency cap', () => {
  let upstream: RawUpstream
  let h: Harness
  const answer = gate()
  beforeAll(async () => {
    upstream = await startRawUpstream(async (_req, res) => {
      await answer.wait
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } }))
    })
    h = await startHarness({ upstreamUrl: upstream.url, config: { max_body_bytes: MAX_BODY_BYTES, max_concurrent_per_identity: 1 } })
  })
  afterAll(async () => {
    answer.open()
    await h.close()
    await upstream.close()
  })

  test('reaches a client still sending its body', async () => {
    const held = fetch(`${h.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('echo')),
    })
    await waitFor(() => upstream.seen.length === 1, { what: "alice's first call to hold her only slot" })
    const port = Number(new URL(h.url).port)
    // Within max_body_bytes: refused for the cap, whether the cap is judged before the body is read or after.
    const bytes = MAX_BODY_BYTES - 1024
    const upload = await uploadThenRead(
      port,
      `POST /mcp HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: ${bytes}\r\nconnection: close\r\nx-wardline-identity: alice\r\nx-wardline-tenant: acme\r\n\r\n`,
      largeCall(bytes),
    )
    expect(upload).toEqual({ writeError: null, status: 429, sent: bytes })
    answer.open()
    expect((await held).status).toBe(200)
  })
})
