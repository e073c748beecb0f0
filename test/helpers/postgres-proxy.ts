import { type AddressInfo, type Server, type Socket, connect, createServer } from 'node:net'

/**
 * A TCP proxy in front of a Postgres server, for what tests must see or break on the wire:
 *  - `roundTrips` counts client→server round trips (each extended-protocol Sync or simple Query
 *    message ends one: the client then waits for ReadyForQuery);
 *  - `pause()` stops forwarding (a hung network: sockets open, nothing arrives), `resume()` lets
 *    the held bytes through;
 *  - `refuse()` drops every connection and refuses new ones (a database that went away).
 */
export class PostgresProxy {
  roundTrips = 0
  /** The SQL text of every statement clients sent (simple Query or extended-protocol Parse), in order. */
  readonly statements: string[] = []
  private paused = false
  private refusing = false
  private readonly sockets = new Set<Socket>()
  private readonly held: Array<() => void> = []

  private constructor(
    private readonly server: Server,
    private readonly target: { host: string; port: number },
  ) {}

  static async start(targetUrl: string): Promise<PostgresProxy> {
    const u = new URL(targetUrl)
    let proxy: PostgresProxy | null = null
    const server = createServer((client) => proxy?.accept(client))
    proxy = new PostgresProxy(server, { host: u.hostname, port: Number(u.port || 5432) })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return proxy
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port
  }

  /** `url` with host and port replaced by the proxy's. */
  urlFor(url: string): string {
    const u = new URL(url)
    u.hostname = '127.0.0.1'
    u.port = String(this.port)
    return u.toString()
  }

  pause(): void {
    this.paused = true
  }

  resume(): void {
    this.paused = false
    for (const release of this.held.splice(0)) release()
  }

  refuse(): void {
    this.refusing = true
    for (const s of this.sockets) s.destroy()
  }

  /** Accepts connections again after `refuse()`. */
  allow(): void {
    this.refusing = false
  }

  async close(): Promise<void> {
    this.refuse()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private accept(client: Socket): void {
    if (this.refusing) {
      client.destroy()
      return
    }
    const upstream = connect(this.target.port, this.target.host)
    this.sockets.add(client).add(upstream)
    const forget = (): void => {
      client.destroy()
      upstream.destroy()
      this.sockets.delete(client)
      this.sockets.delete(upstream)
    }
    client.on('error', forget).on('close', forget)
    upstream.on('error', forget).on('close', forget)
    const counter = new FrontendCounter(
      () => this.roundTrips++,
      (sql) => this.statements.push(sql),
    )
    client.on('data', (chunk) =>
      this.forward(() => {
        counter.feed(chunk)
        upstream.write(chunk)
      }),
    )
    upstream.on('data', (chunk) => this.forward(() => client.write(chunk)))
  }

  private forward(send: () => void): void {
    if (this.paused || this.held.length > 0) this.held.push(send)
    else send()
  }
}

/** Walks the frontend message stream: the untyped startup packet(s), then type byte + int32 length. */
class FrontendCounter {
  private buffer: Buffer = Buffer.alloc(0)
  private startup = true

  constructor(
    private readonly onRoundTrip: () => void,
    private readonly onStatement: (sql: string) => void,
  ) {}

  feed(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk])
    for (;;) {
      if (this.startup) {
        if (this.buffer.length < 8) return
        const length = this.buffer.readInt32BE(0)
        if (this.buffer.length < length) return
        const code = this.buffer.readInt32BE(4)
        // SSLRequest / GSSENCRequest are followed by another startup packet.
        this.startup = code === 80877103 || code === 80877104
        this.buffer = this.buffer.subarray(length)
        continue
      }
      if (this.buffer.length < 5) return
      const length = this.buffer.readInt32BE(1) + 1
      if (this.buffer.length < length) return
      const type = String.fromCharCode(this.buffer[0])
      if (type === 'S' || type === 'Q') this.onRoundTrip()
      // Q: the query text; P: the statement name, then the query text (both NUL-terminated).
      if (type === 'Q') this.onStatement(this.buffer.toString('utf8', 5, length - 1))
      if (type === 'P') {
        const nameEnd = this.buffer.indexOf(0, 5)
        this.onStatement(this.buffer.toString('utf8', nameEnd + 1, this.buffer.indexOf(0, nameEnd + 1)))
      }
      this.buffer = this.buffer.subarray(length)
    }
  }
}
