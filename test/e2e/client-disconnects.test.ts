/**
 * A client may leave at any moment of the request phase: while its token is verified for the first
 * time (the JWKS slow to answer), while its body is read, while its budget is checked, while its call
 * waits for the upstream. Whenever it leaves, its request ends with exactly one audit entry, and
 * nothing of it is left running for shutdown to wait on.
 */
import { join } from 'node:path'
import { type Socket, connect } from 'node:net'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import type { AdmitResult, BucketCharge, BudgetStore } from '../../src/budget/store'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { type JwksServer, type KeyPair, hour, rsaKey, signWith, startJwksServer } from '../auth/forge'
import { capturingLogger } from '../budget/budget-harness'
import { configFrom, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, gate, startRawUpstream } from './raw-upstream'

/** A real MemoryBudgetStore whose checks wait until the test lets them go on (a slow database). */
class SlowStore implements BudgetStore {
  readonly memory = new MemoryBudgetStore()
  started = 0
  finished = 0
  release = gate()
  async admit(charges: readonly BucketCharge[]): Promise<AdmitResult> {
    this.started++
    await this.release.wait
    const result = await this.memory.admit(charges)
    this.finished++
    return result
  }
  refund(charges: readonly BucketCharge[], result: AdmitResult): Promise<void> {
    return this.memory.refund(charges, result)
  }
  async close(): Promise<void> {}
}

let jwks: JwksServer
let upstream: RawUpstream
let gateway: RunningGateway
let store: SlowStore
let known: KeyPair
let rotated: KeyPair
let auditFile: string
let logs: ReturnType<typeof capturingLogger>['lines']
/** Requests that reached the gateway's handler (it runs first, up to its first await). */
let arrived = 0
const upstreamAnswers = gate()

beforeAll(async () => {
  known = await rsaKey('k1')
  rotated = await rsaKey('k2')
  jwks = await startJwksServer([known.jwk])
  upstream = await startRawUpstream(async (_req, res) => {
    await upstreamAnswers.wait
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: {} }))
  })
  const dir = tempDir('wardline-disconnects-')
  auditFile = join(dir, 'audit.jsonl')
  const config = configFrom(
    {
      listen: '127.0.0.1:0',
      upstream: upstream.url,
      upstream_connections: 1,
      shutdown_grace_seconds: 20,
      auth: { mode: 'jwt', jwt: { jwks_url: jwks.url, algorithms: ['RS256'], jwks_cooldown_seconds: 0 } },
      audit: { output: auditFile },
      features: { budget_enforcement: true },
    },
    {},
    dir,
  )
  store = new SlowStore()
  const captured = capturingLogger()
  logs = captured.lines
  gateway = await startGateway(config, { log: captured.log, budgetStore: store })
  gateway.server.on('request', () => arrived++)
})

afterAll(async () => {
  upstreamAnswers.open()
  await gateway?.shutdown()
  await upstream?.close()
  await jwks?.close()
})

const port = (): number => Number(new URL(gateway.url).port)

/** Connects and sends `text` (a request head, and as much of its body as the scenario wants). */
function send(text: string): Socket {
  const socket = connect(port(), '127.0.0.1')
  socket.on('error', () => undefined) // the gateway may answer and close first (Node's own 400)
  socket.write(text)
  return socket
}

function head(token: string, body: string, extra = ''): string {
  return (
    `POST /mcp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\n` +
    `accept: application/json, text/event-stream\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n`
  )
}

const openConnections = (): Promise<number> => new Promise((resolve) => gateway.server.getConnections((_err, n) => resolve(n)))

async function entriesOf(identity: string): Promise<number> {
  await gateway.audit.flush()
  return readJsonl(auditFile).filter((e) => e.identity === identity).length
}

/** Leaves (closes the connection) once the gateway has seen every request arrive, then waits until it saw the close. */
async function leave(sockets: Socket[]): Promise<void> {
  for (const s of sockets) s.destroy()
  await waitFor(async () => (await openConnections()) === 0, { what: 'the gateway to see the clients leave' })
}

test('a client that leaves at any await of the request phase gets exactly one audit entry, and shutdown waits for nothing', async () => {
  const body = JSON.stringify(toolCall('echo', { text: 'hi' }))
  const signed = (key: KeyPair, sub: string): Promise<string> => signWith(key, { sub, tenant: 'acme', exp: hour() })

  // 1. Authentication: tokens signed by a key the gateway has not fetched yet, while the JWKS is slow.
  jwks.keys = [known.jwk, rotated.jwk]
  const jwksAnswers = gate()
  jwks.hold = jwksAnswers.wait
  const fetchesBefore = jwks.fetches
  const during = [
    // the head only: not a byte of the announced body
    send(head(await signed(rotated, 'auth-head-only'), body)),
    // half the body
    send(head(await signed(rotated, 'auth-half-body'), body) + body.slice(0, 20)),
    // the whole body, then gone before the gateway read it
    send(head(await signed(rotated, 'auth-whole-body'), body) + body),
    // a malformed chunk size: Node answers 400 itself and closes the connection
    send(
      head(await signed(rotated, 'auth-bad-chunk'), body)
        .replace(/content-length: \d+\r\n/, 'transfer-encoding: chunked\r\n')
        .concat('zz\r\n'),
    ),
  ]
  await waitFor(() => arrived === 4 && jwks.fetches > fetchesBefore, { what: 'four requests waiting on the JWKS fetch' })
  await leave(during)
  jwks.hold = null
  jwksAnswers.open()

  // 2. The body read: the token verifies at once, the client stops halfway through its body.
  const reading = send(head(await signed(known, 'body-half'), body) + body.slice(0, 20))
  await waitFor(() => arrived === 5, { what: 'the request reading its body' })
  await leave([reading])

  // 3. The budget check: the store is slow to answer.
  const checking = send(head(await signed(known, 'budget-check'), body) + body)
  await waitFor(() => store.started === 1, { what: 'the budget check to start' })
  await leave([checking])
  store.release.open()

  // 4. The upstream: one call holds the only upstream connection, a second waits for it; both leave.
  const forwarded = send(head(await signed(known, 'upstream-answer'), body) + body)
  await waitFor(() => upstream.seen.length === 1, { what: 'the call to reach the upstream' })
  const queued = send(head(await signed(known, 'upstream-connect'), body) + body)
  // Its budget check done, nothing but the upstream is left for it to wait on.
  await waitFor(() => store.finished === 3, { what: 'the second call to pass its budget check' })
  await leave([queued, forwarded])

  const identities = [
    'auth-head-only',
    'auth-half-body',
    'auth-whole-body',
    'auth-bad-chunk',
    'body-half',
    'budget-check',
    'upstream-answer',
    'upstream-connect',
  ]
  for (const identity of identities) {
    await waitFor(async () => (await entriesOf(identity)) > 0, { what: `the audit entry of ${identity}`, timeoutMs: 15_000 })
  }
  await gateway.audit.flush()
  const entries = readJsonl(auditFile)
  expect(identities.map((identity) => [identity, entries.filter((e) => e.identity === identity).length])).toEqual(
    identities.map((identity) => [identity, 1]),
  )
  const cutOff = [499, 'client closed the connection before the body ended']
  // After the body, what the budget did with the call follows (refunded when it never left the gateway).
  const left = [499, expect.stringMatching(/^client closed the connection(;|$)/)]
  expect(Object.fromEntries(entries.map((e) => [e.identity, [e.status, e.reason]]))).toEqual({
    'auth-head-only': cutOff,
    'auth-half-body': cutOff,
    'auth-whole-body': cutOff,
    'auth-bad-chunk': [400, 'request body not valid HTTP/1.1 framing (HPE_INVALID_CHUNK_SIZE): answered 400 by Node, connection closed'],
    'body-half': cutOff,
    'budget-check': left,
    'upstream-answer': left,
    'upstream-connect': left,
  })
  expect(upstream.seen).toHaveLength(1) // the queued call never reached the upstream

  // Nothing is left in flight: shutdown does not wait out shutdown_grace_seconds (20 s) for anyone.
  await gateway.shutdown()
  expect(logs.map((l) => l.message)).not.toContain('shutdown grace period over: closing open requests')
  expect(logs.map((l) => l.message)).toContain('wardline stopped')
})
