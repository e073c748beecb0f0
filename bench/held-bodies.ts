/**
 * Memory one identity can make the gateway hold (issue 24, item 5): one caller with
 * max_concurrent_per_identity 4 opens many POSTs that announce a 4 MiB body, sends most of it and
 * stops. Each body the gateway starts reading is buffered until the request times out, so what bounds
 * the memory is how many of them it reads at once. Prints how the connections were answered and the
 * gateway process's RSS before and after.
 *
 *   npm run build && node dist/bench/held-bodies.js [connections=60] [bytes sent per body=3.5 MiB]
 *
 * The gateway runs in a child process of its own (bench/server-process.ts), so its RSS is not mixed
 * with the attacker's buffers; its upstream never sees a request here.
 */
import { fork } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { type Socket, connect } from 'node:net'
import { join } from 'node:path'
import type { ServerJob } from './servers'
import { startServer } from './servers'

const MIB = 1024 * 1024
const CAP = 4
const MAX_BODY_BYTES = 4 * MIB

function rssMiB(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return match === null ? Number.NaN : Number(match[1]) / 1024
}

function startGatewayProcess(job: ServerJob): Promise<{ url: string; pid: number; stop(): void }> {
  const child = fork(join(__dirname, 'server-process.js'), [JSON.stringify(job)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('message', (msg: { url?: string; error?: string }) => {
      if (msg.url === undefined) return reject(new Error(`gateway did not start: ${msg.error ?? 'no url'}`))
      resolve({ url: msg.url, pid: child.pid as number, stop: () => child.send('stop') })
    })
  })
}

type Fate = 'answered' | 'reset' | 'held'

interface Attempt {
  readonly socket: Socket
  fate: Fate
  status: number
  /** Resolves once the body bytes were written (or the connection ended first). */
  readonly written: Promise<void>
}

/** One POST announcing a MAX_BODY_BYTES body, of which `sent` bytes are written before it stalls. */
function halfSend(port: number, sent: number): Attempt {
  const socket = connect(port, '127.0.0.1')
  const head =
    'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n' +
    `X-Wardline-Identity: attacker\r\nX-Wardline-Tenant: guest\r\nContent-Length: ${MAX_BODY_BYTES}\r\n\r\n`
  const start = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
  const body = Buffer.alloc(sent, 0x61)
  body.write(start)
  const attempt: Attempt = {
    socket,
    fate: 'held',
    status: 0,
    written: new Promise<void>((resolve) => {
      socket.once('close', () => resolve())
      socket.write(head)
      socket.write(body, () => resolve())
    }),
  }
  socket.on('data', (chunk: Buffer) => {
    if (attempt.status !== 0) return
    const match = /^HTTP\/1\.1 (\d{3})/.exec(chunk.toString('latin1', 0, 16))
    attempt.status = match === null ? -1 : Number(match[1])
    attempt.fate = 'answered'
  })
  socket.on('error', () => {
    if (attempt.fate === 'held') attempt.fate = 'reset'
  })
  socket.on('close', () => {
    if (attempt.fate === 'held') attempt.fate = 'reset'
  })
  return attempt
}

async function main(): Promise<void> {
  const connections = Number(process.argv[2] ?? 60)
  const sent = Number(process.argv[3] ?? Math.floor(3.5 * MIB))
  const upstream = await startServer({ kind: 'upstream' })
  const gateway = await startGatewayProcess({
    kind: 'gateway',
    upstreamUrl: upstream.url,
    tree: { max_concurrent_per_identity: CAP, max_body_bytes: MAX_BODY_BYTES },
  })
  try {
    const port = Number(new URL(gateway.url).port)
    // One ordinary request first, so the baseline includes a warmed-up gateway.
    await fetch(`${gateway.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-wardline-identity': 'warm' },
      body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    })
    const before = rssMiB(gateway.pid)
    const attempts = Array.from({ length: connections }, () => halfSend(port, sent))
    await Promise.all(attempts.map((a) => a.written))
    // Let the gateway take in what was written before reading its memory.
    await new Promise((resolve) => setTimeout(resolve, 2000))
    const after = rssMiB(gateway.pid)
    const count = (fate: Fate): number => attempts.filter((a) => a.fate === fate).length
    const statuses = [...new Set(attempts.filter((a) => a.fate === 'answered').map((a) => a.status))].join(', ')
    process.stdout.write(
      `held-bodies: ${connections} POSTs of one identity (cap ${CAP}), each announcing ${MAX_BODY_BYTES / MIB} MiB and sending ${(sent / MIB).toFixed(1)} MiB\n` +
        `  answered at once: ${count('answered')} (status ${statuses || '-'}), connection reset: ${count('reset')}, held unanswered: ${count('held')}\n` +
        `  gateway RSS: ${before.toFixed(0)} MiB before, ${after.toFixed(0)} MiB after (+${(after - before).toFixed(0)} MiB)\n`,
    )
    for (const a of attempts) a.socket.destroy()
  } finally {
    gateway.stop()
    await upstream.stop()
  }
}

void main().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`)
  process.exit(1)
})
