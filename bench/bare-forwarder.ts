/**
 * The floor a Node proxy cannot go below: an undici Pool.dispatch forwarder that buffers
 * the body, JSON.parses it, drops hop-by-hop headers and streams the answer back. No auth, no
 * budget, no policy, no audit. The core bench measures the gateway against it in the same run.
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Pool, type Dispatcher } from 'undici'

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
])

class Relay implements Dispatcher.DispatchHandler {
  constructor(private readonly res: ServerResponse) {}
  onRequestStart(): void {}
  onResponseStart(_c: Dispatcher.DispatchController, status: number, headers: IncomingHttpHeaders): void {
    const out: string[] = []
    for (const name in headers) {
      const value = headers[name]
      if (value === undefined || HOP_BY_HOP.has(name)) continue
      if (Array.isArray(value)) for (const v of value) out.push(name, v)
      else out.push(name, value)
    }
    this.res.writeHead(status, out)
  }
  onResponseData(_c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.res.write(chunk)
  }
  onResponseEnd(): void {
    this.res.end()
  }
  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    if (this.res.headersSent) this.res.destroy(err)
    else this.res.writeHead(502).end()
  }
}

export async function startBareForwarder(upstreamUrl: string): Promise<{ url: string; stop(): Promise<void> }> {
  const origin = new URL(upstreamUrl).origin
  const pool = new Pool(origin, { connections: 128, pipelining: 1 })
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      if (body.length > 0) JSON.parse(body.toString('utf8'))
      const headers: string[] = []
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        if (!HOP_BY_HOP.has(req.rawHeaders[i].toLowerCase())) headers.push(req.rawHeaders[i], req.rawHeaders[i + 1])
      }
      pool.dispatch({ origin, path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers, body }, new Relay(res))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    stop: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await pool.destroy()
    },
  }
}
