/**
 * A complete MCP client for Wardline, on the official TypeScript SDK: connect with a bearer token, list
 * the tools, call one (or the same one several times), say readably why a call was refused, and close.
 *
 * From a checkout (`npm install` builds it into dist/examples/client.js, with the gateway running):
 *
 *   export WARDLINE_TOKEN=$(node dist/src/main.js token --sub alice --tenant acme)
 *   node dist/examples/client.js --url http://127.0.0.1:8080/mcp --tool echo --args '{"text":"hi"}'
 *
 * Options (each also read from the environment; an option wins over its variable):
 *   --url <url>      WARDLINE_URL    the gateway's MCP endpoint (default http://127.0.0.1:8080/mcp)
 *   --token <jwt>    WARDLINE_TOKEN  the bearer token; prefer the variable, argv is visible to `ps`
 *   --tool <name>                    the tool to call (default echo)
 *   --args <json>                    its arguments, a JSON object (default {"text":"hello from examples/client.ts"})
 *   --calls <n>                      call it n times in a row, stopping at the first refusal (default 1)
 *
 * Exit codes: 0 every call answered; 1 bad usage (or a tool this caller is not offered); 2 the gateway
 * refused the connection (401, 403); 3 a call was refused (429, 403, 503 or a refusal result); 4 the
 * gateway or the MCP server behind it could not be reached or failed.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpError } from '@modelcontextprotocol/sdk/types.js'

export interface ClientOptions {
  readonly url: URL
  readonly token: string
  readonly tool: string
  readonly args: Record<string, unknown>
  readonly calls: number
}

/** A failure with the exit code it maps to and a line for a person. */
class Failure extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message)
  }
}

const USAGE = 'usage: node dist/examples/client.js [--url <url>] [--token <jwt>] [--tool <name>] [--args <json object>] [--calls <n>]'

/** Reads the options from argv and the environment; a Failure (exit 1) names the one that is wrong. */
export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv): ClientOptions {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i]
    if (!['--url', '--token', '--tool', '--args', '--calls'].includes(name)) throw new Failure(1, `unknown option ${name}\n${USAGE}`)
    if (i + 1 >= argv.length) throw new Failure(1, `${name} needs a value\n${USAGE}`)
    flags.set(name, argv[i + 1])
  }
  const urlText = flags.get('--url') ?? env.WARDLINE_URL ?? 'http://127.0.0.1:8080/mcp'
  let url: URL
  try {
    url = new URL(urlText)
  } catch {
    throw new Failure(1, `--url ${urlText}: not a URL (e.g. http://127.0.0.1:8080/mcp)`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Failure(1, `--url ${urlText}: must be http:// or https://`)
  // `export WARDLINE_TOKEN="Bearer eyJ…"` is a common slip: the header would read "Bearer Bearer …" (401).
  const token = (flags.get('--token') ?? env.WARDLINE_TOKEN ?? '').trim().replace(/^Bearer\s+/i, '')
  if (token === '') {
    throw new Failure(
      1,
      'no token: set WARDLINE_TOKEN (e.g. export WARDLINE_TOKEN=$(node dist/src/main.js token --sub alice --tenant acme))',
    )
  }
  if (/\s/.test(token)) throw new Failure(1, 'the token contains whitespace: pass the JWT alone (three base64url parts joined by dots)')
  let args: unknown = { text: 'hello from examples/client.ts' }
  const argsText = flags.get('--args')
  if (argsText !== undefined) {
    try {
      args = JSON.parse(argsText)
    } catch (err) {
      throw new Failure(1, `--args: not JSON (${(err as Error).message})`)
    }
  }
  if (typeof args !== 'object' || args === null || Array.isArray(args))
    throw new Failure(1, '--args: must be a JSON object, e.g. {"text":"hi"}')
  const callsText = flags.get('--calls') ?? '1'
  const calls = Number(callsText)
  if (!/^\d+$/.test(callsText) || calls < 1 || calls > 1000)
    throw new Failure(1, `--calls ${callsText}: must be a whole number from 1 to 1000`)
  return { url, token, tool: flags.get('--tool') ?? 'echo', args: args as Record<string, unknown>, calls }
}

/** What the gateway said about the last POST: the budget and retry fields a refusal or an admitted call carries. */
interface LastAnswer {
  status: number
  headers: Headers
}

/** The JSON-RPC error body the SDK folds into a StreamableHTTPError's message, when there is one. */
function rpcError(err: StreamableHTTPError): { message?: string; data?: { retry_after_seconds?: number; bucket?: string } } {
  const text = err.message.slice(err.message.indexOf('{'))
  try {
    const body = JSON.parse(text) as { error?: { message?: string; data?: { retry_after_seconds?: number; bucket?: string } } }
    return body.error ?? {}
  } catch {
    return {}
  }
}

/** One line for a person, and the exit code, for whatever a connect or a call threw. */
export function describeFailure(err: unknown, last: LastAnswer | null, url: URL, connecting: boolean): Failure {
  if (err instanceof Failure) return err
  if (err instanceof StreamableHTTPError) {
    const { message = '', data } = rpcError(err)
    const retry = data?.retry_after_seconds ?? Number(last?.headers.get('retry-after') ?? NaN)
    const retryText = Number.isFinite(retry) ? `; retry in ${retry} s` : ''
    const status: number = err.code ?? -1
    switch (status) {
      case 401: {
        // The challenge says which check failed (expired, bad signature…) without echoing the token.
        const challenge = last?.headers.get('www-authenticate')
        const why = /error_description="([^"]*)"/.exec(challenge ?? '')?.[1]
        // A revoked token or identity stays refused whatever token is minted for it: only an operator can lift it.
        const revoked = /\brevoked\b/.test(`${message} ${why ?? ''}`)
        const remedy = revoked
          ? 'this token (or its identity) was revoked; ask an operator (wardline revoke --list)'
          : 'mint a fresh token (wardline token) or check auth.jwt'
        return new Failure(
          2,
          `401 ${message || 'Unauthorized'}${why !== undefined && !message.includes(why) ? ` (${why})` : ''}: ${remedy}`,
        )
      }
      case 403:
        return new Failure(
          connecting ? 2 : 3,
          `403 ${message || 'Forbidden'}${connecting ? ' (Host or Origin not allowed, or policy)' : ' (denied by Wardline policy)'}`,
        )
      case 429:
        return new Failure(
          3,
          `429 ${message || 'Too Many Requests'}${data?.bucket !== undefined ? ` (bucket ${data.bucket})` : ''}${retryText}`,
        )
      case 503:
        return new Failure(3, `503 ${message || 'Service Unavailable'}${retryText}`)
      case 502:
      case 504:
        return new Failure(4, `${status} ${message}: Wardline could not get an answer from the MCP server behind it`)
      case 404:
        // Forwarded by Wardline (it adds X-Wardline-Request-Id; it never answers a connect 404 itself):
        // the MCP server behind it has no such path. The gateway appends the request's path to its
        // upstream URL, so an upstream written with the server's /mcp sends /mcp to /mcp/mcp.
        if (connecting && last?.headers.has('x-wardline-request-id') === true) {
          const path = url.pathname.replace(/\/+$/, '') || '/'
          return new Failure(
            4,
            path.endsWith('/mcp')
              ? `HTTP 404 from ${url.href}: the MCP server behind Wardline has no ${path}. Likely cause: the gateway's upstream URL ends with the server's path (upstream: http://host:3001/mcp sends ${path} to /mcp${path}); set upstream to the server's address without it (wardline check-config warns about this)`
              : `HTTP 404 from ${url.href}: the MCP server behind Wardline has no ${path}: is this the Streamable HTTP endpoint (usually …/mcp)? If it is, check the path of the gateway's upstream URL, which goes in front of ${path}`,
          )
        }
        return new Failure(4, `HTTP ${status} from ${url.href}: is this the Streamable HTTP endpoint (usually …/mcp)?`)
      case 405:
        // The SSE pair (/sse) or a wrong path: this client speaks Streamable HTTP, one endpoint, usually /mcp.
        return new Failure(4, `HTTP ${status} from ${url.href}: is this the Streamable HTTP endpoint (usually …/mcp)?`)
      default:
        return new Failure(4, `HTTP ${status} from ${url.href}: ${message || err.message}`)
    }
  }
  if (err instanceof McpError) return new Failure(3, `the MCP server answered with error ${err.code}: ${err.message}`)
  // fetch() throws "fetch failed" and keeps the reason (ECONNREFUSED, ENOTFOUND, "bad port") in its cause.
  const cause = (err as { cause?: { code?: string; message?: string } } | null)?.cause
  if (cause !== undefined) return new Failure(4, `cannot reach ${url.origin}: ${cause.code ?? cause.message ?? 'fetch failed'}`)
  return new Failure(4, `failed: ${err instanceof Error ? err.message : String(err)}`)
}

/** The text parts of a tool result, joined: what an agent would read. */
function resultText(result: object): string {
  const content = (result as { content?: unknown }).content
  const parts = Array.isArray(content) ? (content as Array<{ type?: string; text?: string }>) : []
  return parts.map((p) => (p.type === 'text' ? (p.text ?? '') : `[${p.type ?? 'unknown'} content]`)).join(' ')
}

/** Connects, lists, calls and closes; writes progress to `out` and returns the exit code (0 on success). */
export async function runClient(options: ClientOptions, out: (line: string) => void, err: (line: string) => void): Promise<number> {
  let last: LastAnswer | null = null
  // Only POSTs are recorded: the standalone GET stream answers on its own schedule and says nothing about a call.
  const recordingFetch = async (input: string | URL, init?: RequestInit): Promise<Response> => {
    const response = await fetch(input, init)
    if ((init?.method ?? 'GET') === 'POST') last = { status: response.status, headers: response.headers }
    return response
  }
  const transport = new StreamableHTTPClientTransport(options.url, {
    requestInit: { headers: { Authorization: `Bearer ${options.token}` } },
    fetch: recordingFetch,
  })
  const client = new Client({ name: 'wardline-example-client', version: '1.0.0' })
  let connecting = true
  try {
    await client.connect(transport)
    connecting = false
    const server = client.getServerVersion()
    out(
      `connected to ${options.url.href} (server ${server?.name ?? '?'} ${server?.version ?? ''}, session ${transport.sessionId ?? 'none: stateless'})`,
    )
    const { tools } = await client.listTools()
    out(`tools (${tools.length}): ${tools.map((t) => t.name).join(', ')}`)
    if (!tools.some((t) => t.name === options.tool)) {
      // Wardline lists only what the caller's policy allows, so a missing tool may exist but be denied.
      throw new Failure(1, `tool ${options.tool} is not in this caller's tool list (missing upstream, or denied by Wardline policy)`)
    }
    for (let i = 1; i <= options.calls; i++) {
      const label = `call ${i}/${options.calls}: ${options.tool} ${JSON.stringify(options.args)}`
      let result: Awaited<ReturnType<typeof client.callTool>>
      try {
        result = await client.callTool({ name: options.tool, arguments: options.args })
      } catch (e) {
        const failure = describeFailure(e, last, options.url, false)
        err(`${label} refused: ${failure.message}`)
        return failure.exitCode
      }
      if (result.isError === true) {
        // With tool_refusals: result, Wardline answers a refused call this way, with a text a model can act on.
        err(`${label} returned an error result: ${resultText(result)}`)
        return 3
      }
      const remaining = (last as LastAnswer | null)?.headers.get('ratelimit')
      out(`${label} -> ${resultText(result)}${remaining ? `  [RateLimit: ${remaining}]` : ''}`)
    }
    return 0
  } catch (e) {
    const failure = describeFailure(e, last, options.url, connecting)
    err(failure.message)
    return failure.exitCode
  } finally {
    // DELETE ends the session on the server (a stateless server answers 405, which is fine), then close.
    if (!connecting) await transport.terminateSession().catch(() => undefined)
    await client.close().catch(() => undefined)
  }
}

if (require.main === module) {
  let options: ClientOptions
  try {
    options = parseOptions(process.argv.slice(2), process.env)
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`)
    process.exit(1)
  }
  runClient(
    options,
    (line) => process.stdout.write(`${line}\n`),
    (line) => process.stderr.write(`${line}\n`),
  ).then(
    (code) => process.exit(code),
    (e: unknown) => {
      process.stderr.write(`unexpected failure: ${String(e)}\n`)
      process.exit(4)
    },
  )
}
