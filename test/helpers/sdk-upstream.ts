import { randomUUID } from 'node:crypto'
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  StreamableHTTPServerTransport,
  type StreamableHTTPServerTransportOptions,
} from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'

/** What `build` makes for each session: an McpServer or a low-level Server of the official SDK. */
export interface SdkServer {
  connect(transport: Transport): Promise<void>
}

export interface SdkUpstream {
  /** http://127.0.0.1:port; the transport answers on any path. */
  readonly url: string
  readonly server: Server
  /** Closes every session's transport, then the listener and its connections. */
  close(): Promise<void>
}

/**
 * An official SDK server behind the SDK's stateful Streamable HTTP transport on 127.0.0.1, port 0:
 * a request without a known `Mcp-Session-Id` gets a new transport and a new server from `build`, the
 * transport files itself under the session id it creates. `options` go to each transport
 * (enableJsonResponse, an event store…); `onRequest` sees every request first (to count streams).
 */
export async function startSdkUpstream(
  build: () => SdkServer,
  options: Partial<StreamableHTTPServerTransportOptions> = {},
  onRequest?: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<SdkUpstream> {
  const transports = new Map<string, StreamableHTTPServerTransport>()
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    onRequest?.(req, res)
    const sid = req.headers['mcp-session-id']
    let transport = typeof sid === 'string' ? transports.get(sid) : undefined
    if (transport === undefined) {
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        ...options,
        onsessioninitialized: (id) => void transports.set(id, created),
      })
      transport = created
      await build().connect(created)
    }
    await transport.handleRequest(req, res)
  }
  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500)
      res.end(String(err))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    close: async () => {
      for (const t of transports.values()) await t.close().catch(() => undefined)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
