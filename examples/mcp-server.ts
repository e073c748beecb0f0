/**
 * A small MCP server built with the official SDK, used by `npm start`, the tests and docker-compose.yml.
 * It speaks Streamable HTTP on /mcp (stateful with sessions, or stateless with JSON or SSE answers)
 * and the legacy HTTP+SSE transport on GET /sse + POST /messages?sessionId=….
 *
 * Tools: echo, add, whoami (shows the X-Wardline-* headers the gateway set), count_slowly (sends a
 * progress notification per step before its result), expensive_tool. One resource, one resource
 * template (example://notes/{id}) and one prompt; the template's id and the prompt's name complete.
 *
 * Run on its own: node dist/examples/mcp-server.js [--port 3001] [--host 127.0.0.1] [--mode stateful|stateless-json|stateless-sse]
 * (`--help` prints USAGE below).
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { completable } from '@modelcontextprotocol/sdk/server/completable.js'
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js'
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { z } from 'zod'
import { bindOrExplain } from '../src/net/listen'

export const EXAMPLE_MODES = ['stateful', 'stateless-json', 'stateless-sse'] as const
export type ExampleMode = (typeof EXAMPLE_MODES)[number]

/** Binds the example server; a failure says what to change (a config key, a flag), as the gateway does. */
export type ExampleListen = (server: Server, address: { readonly host: string; readonly port: number }) => Promise<void>

export interface ExampleServer {
  readonly url: string
  readonly server: Server
  /** Every request the server received, for tests that check what reached the upstream. */
  readonly seen: Array<{ method: string; url: string; headers: IncomingMessage['headers'] }>
  close(): Promise<void>
}

export function buildMcpServer(): McpServer {
  const mcp = new McpServer({ name: 'wardline-example', version: '1.0.0' })
  mcp.registerTool('echo', { description: 'Returns its text', inputSchema: { text: z.string() } }, ({ text }) => ({
    content: [{ type: 'text', text }],
  }))
  mcp.registerTool('add', { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } }, ({ a, b }) => ({
    content: [{ type: 'text', text: String(a + b) }],
  }))
  mcp.registerTool('whoami', { description: 'Shows the identity headers the gateway forwarded' }, (extra) => {
    const headers = extra.requestInfo?.headers ?? {}
    const text = JSON.stringify({
      identity: headers['x-wardline-identity'] ?? null,
      tenant: headers['x-wardline-tenant'] ?? null,
      authorization: headers.authorization ?? null,
    })
    return { content: [{ type: 'text', text }] }
  })
  mcp.registerTool(
    'count_slowly',
    {
      description: 'Counts to n, sending a progress notification per step',
      inputSchema: { n: z.number().int().min(1).max(100), delay_ms: z.number().int().min(0).max(5000).optional() },
    },
    async ({ n, delay_ms }, extra) => {
      const token = extra._meta?.progressToken
      for (let i = 1; i <= n; i++) {
        if (token !== undefined) {
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: n } })
        }
        if (delay_ms) await new Promise((resolve) => setTimeout(resolve, delay_ms))
      }
      return { content: [{ type: 'text', text: `counted to ${n}` }] }
    },
  )
  mcp.registerTool('expensive_tool', { description: 'Stands in for a costly call (budgeted in the example config)' }, () => ({
    content: [{ type: 'text', text: 'expensive result' }],
  }))
  mcp.registerResource('readme', 'example://readme', { description: 'A static document', mimeType: 'text/plain' }, (uri) => ({
    contents: [{ uri: uri.href, text: 'Wardline example resource' }],
  }))
  // Completable, so completion/complete has something to answer (the gateway judges it as prompts/get).
  const names = ['Alice', 'Alan', 'Bob']
  const greetingName = completable(z.string(), (value) => names.filter((n) => n.startsWith(value)))
  mcp.registerPrompt('greeting', { description: 'Greets someone', argsSchema: { name: greetingName } }, ({ name }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name}` } }],
  }))
  const notes = new ResourceTemplate('example://notes/{id}', {
    list: undefined,
    complete: { id: (value) => ['1', '2', '10'].filter((id) => id.startsWith(value)) },
  })
  mcp.registerResource('note', notes, { description: 'A note by id', mimeType: 'text/plain' }, (uri, { id }) => ({
    contents: [{ uri: uri.href, text: `Note ${String(id)}` }],
  }))
  return mcp
}

export async function startExampleServer(
  options: { port?: number; host?: string; mode?: ExampleMode; listen?: ExampleListen } = {},
): Promise<ExampleServer> {
  const mode = options.mode ?? 'stateful'
  const sessions = new Map<string, StreamableHTTPServerTransport>()
  const legacy = new Map<string, SSEServerTransport>()
  const seen: ExampleServer['seen'] = []

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers })
    const path = (req.url ?? '/').split('?')[0]
    if (path === '/sse' && req.method === 'GET') {
      const transport = new SSEServerTransport('/messages', res)
      legacy.set(transport.sessionId, transport)
      res.on('close', () => legacy.delete(transport.sessionId))
      await buildMcpServer().connect(transport)
      return
    }
    if (path === '/messages' && req.method === 'POST') {
      const id = new URL(req.url ?? '/', 'http://x').searchParams.get('sessionId') ?? ''
      const transport = legacy.get(id)
      if (!transport) return void res.writeHead(404).end('unknown session')
      await transport.handlePostMessage(req, res)
      return
    }
    if (path !== '/mcp') return void res.writeHead(404, { 'content-type': 'text/plain' }).end('not found')

    if (mode !== 'stateful') {
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: mode === 'stateless-json' })
      const mcp = buildMcpServer()
      res.on('close', () => {
        void transport.close()
        void mcp.close()
      })
      await mcp.connect(transport)
      await transport.handleRequest(req, res)
      return
    }
    const sessionId = req.headers['mcp-session-id']
    let transport = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined
    if (!transport) {
      if (typeof sessionId === 'string') {
        res.writeHead(404, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }))
        return
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => void sessions.set(id, created),
        onsessionclosed: (id) => void sessions.delete(id),
      })
      transport = created
      await buildMcpServer().connect(created)
    }
    await transport.handleRequest(req, res)
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' })
      res.end(String(err))
    })
  })
  const host = options.host ?? '127.0.0.1'
  const listen = options.listen ?? ((s, address) => bindOrExplain(s, address, 'the example MCP server address', 'choose another port'))
  await listen(server, { host, port: options.port ?? 0 })
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    server,
    seen,
    close: async () => {
      for (const t of sessions.values()) await t.close().catch(() => undefined)
      for (const t of legacy.values()) await t.close().catch(() => undefined)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

const USAGE = `usage: node dist/examples/mcp-server.js [--port <n>] [--host <address>] [--mode <mode>]

The example MCP server (official MCP SDK) that \`npm start\` puts behind Wardline, run on its own.
It reads no environment variables (\`npm start\` starts it on the port of WARDLINE_UPSTREAM instead).

  --port <n>        port to listen on (default 3001; 0 picks a free one)
  --host <address>  address to listen on (default 127.0.0.1)
  --mode <mode>     stateful        Streamable HTTP with sessions (Mcp-Session-Id); the default
                    stateless-json  no sessions; each POST answered with one JSON body
                    stateless-sse   no sessions; each POST answered with an SSE stream
  --help            print this and exit

Endpoints: POST/GET/DELETE /mcp (Streamable HTTP); GET /sse + POST /messages?sessionId=… (legacy HTTP+SSE).
Tools: echo, add, whoami, count_slowly, expensive_tool. Resources: example://readme, example://notes/{id}.
Prompt: greeting.`

/** The command line of the server run on its own; an Error (exit 2) names the argument that is wrong. */
export function parseServerArgs(argv: readonly string[]): { help: true } | { help: false; port: number; host: string; mode: ExampleMode } {
  if (argv.includes('--help') || argv.includes('-h')) return { help: true }
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i += 2) {
    if (!['--port', '--host', '--mode'].includes(argv[i])) throw new Error(`unknown argument ${argv[i]}`)
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`)
    flags.set(argv[i], argv[i + 1])
  }
  const portText = flags.get('--port') ?? '3001'
  const port = Number(portText)
  if (!/^\d+$/.test(portText) || port > 65535) throw new Error(`--port ${portText}: must be a whole number from 0 to 65535`)
  const mode = flags.get('--mode') ?? 'stateful'
  if (!(EXAMPLE_MODES as readonly string[]).includes(mode)) throw new Error(`--mode ${mode}: must be one of ${EXAMPLE_MODES.join(', ')}`)
  return { help: false, port, host: flags.get('--host') ?? '127.0.0.1', mode: mode as ExampleMode }
}

if (require.main === module) {
  let parsed: ReturnType<typeof parseServerArgs>
  try {
    parsed = parseServerArgs(process.argv.slice(2))
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE.split('\n')[0]}  (--help says more)\n`)
    process.exit(2)
  }
  if (parsed.help) {
    process.stdout.write(`${USAGE}\n`)
    process.exit(0)
  }
  startExampleServer({
    ...parsed,
    listen: (server, address) =>
      bindOrExplain(server, address, '--host/--port', 'pass another --port or --host (or stop what listens there)'),
  }).then(
    (s) => process.stderr.write(`example MCP server (${parsed.mode}) on ${s.url}/mcp (legacy SSE on ${s.url}/sse)\n`),
    (err) => {
      process.stderr.write(`example MCP server failed to start: ${err instanceof Error ? err.message : String(err)}\n`)
      process.exit(1)
    },
  )
}
