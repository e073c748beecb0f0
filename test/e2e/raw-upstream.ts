import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface SeenRequest {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage['headers']
  readonly rawHeaders: readonly string[]
  body: string
  /** Resolves when the upstream's side of this request closes (finished, or aborted by the gateway). */
  readonly closed: Promise<{ finished: boolean }>
}

/** What the gateway's health probe sends as its User-Agent (upstream/probe.ts). */
const PROBE_USER_AGENT = 'wardline-health-check'

export interface RawUpstream {
  readonly url: string
  readonly seen: SeenRequest[]
  close(): Promise<void>
}

/**
 * A plain node:http server on port 0 whose answer each test writes by hand, for what the example MCP
 * server cannot do on cue: stall, stream at a chosen moment, break off, send odd headers. It records
 * every request the gateway forwards, with its body and when its response closed. The gateway's own
 * health probe (upstream/probe.ts, by its User-Agent) is answered 404 here and not recorded: these
 * tests count and answer what callers send; test/upstream/probe.test.ts is about the probe.
 */
export async function startRawUpstream(
  answer: (req: IncomingMessage, res: ServerResponse, seen: SeenRequest) => void | Promise<void>,
): Promise<RawUpstream> {
  const seen: SeenRequest[] = []
  const server: Server = createServer((req, res) => {
    if (req.headers['user-agent'] === PROBE_USER_AGENT) {
      res.writeHead(404).end()
      return
    }
    const closed = new Promise<{ finished: boolean }>((resolve) => res.on('close', () => resolve({ finished: res.writableFinished })))
    const record: SeenRequest = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      body: '',
      closed,
    }
    seen.push(record)
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      record.body = Buffer.concat(chunks).toString('utf8')
      void answer(req, res, record)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** A promise with its resolver, for letting a test decide when an upstream goes on. */
export function gate(): { wait: Promise<void>; open(): void } {
  let open!: () => void
  const wait = new Promise<void>((resolve) => {
    open = resolve
  })
  return { wait, open }
}

/** A port nothing listens on: bound once, then released. */
export async function closedPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}
