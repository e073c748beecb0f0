/**
 * `npm start`: the example MCP server and the gateway in front of it, on the embedded default
 * (in-memory budgets, JSONL audit), configured by ./wardline.yaml. `--help` prints USAGE below.
 */
import { loadConfig } from '../src/config/load'
import { serve } from '../src/cli/serve'
import { mintToken } from '../src/cli/token'
import type { Config } from '../src/config/types'
import { listenOrExplain } from '../src/net/listen'
import { EXAMPLE_MODES, type ExampleMode, startExampleServer } from './mcp-server'

const USAGE = `usage: npm start   (node dist/examples/demo.js)

Starts the example MCP server and Wardline in front of it, configured by wardline.yaml, and prints
a token and curl commands to try. Ctrl-C stops both. It takes no arguments; the environment sets:

  WARDLINE_CONFIG        the config file (default wardline.yaml)
  WARDLINE_EXAMPLE_MODE  the example server's transport: stateless-json (the default: one curl calls
                         a tool), stateful (sessions: initialize first), or stateless-sse
  WARDLINE_UPSTREAM      read by wardline.yaml: the example server listens on its host and port
                         (default http://127.0.0.1:3001)
  WARDLINE_LISTEN        read by wardline.yaml: where Wardline listens (default 127.0.0.1:8080)
  WARDLINE_JWT_SECRET    read by wardline.yaml: the token secret (default: a public development one)`

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${USAGE}\n`)
    return
  }
  if (args.length > 0) throw new Error(`unexpected argument ${args[0]} (it takes none; --help lists the variables it reads)`)
  // Stateless by default so one curl can call a tool; WARDLINE_EXAMPLE_MODE=stateful shows sessions.
  const modeText = process.env.WARDLINE_EXAMPLE_MODE ?? 'stateless-json'
  if (!(EXAMPLE_MODES as readonly string[]).includes(modeText)) {
    throw new Error(`WARDLINE_EXAMPLE_MODE=${modeText}: must be one of ${EXAMPLE_MODES.join(', ')}`)
  }
  const mode = modeText as ExampleMode
  const configPath = process.env.WARDLINE_CONFIG ?? 'wardline.yaml'
  const config = loadConfig(configPath)
  // With servers: the example server stands in for the first of them.
  const upstream = new URL(config.upstream?.url ?? config.servers[0].url)
  // The example server listens where the config's upstream points, so a busy port is the `upstream`
  // key's to change: the same words as the gateway's own listen failure, naming the variable.
  const example = await startExampleServer({
    port: Number(upstream.port || 80),
    host: upstream.hostname.replace(/^\[(.*)\]$/, '$1'),
    mode,
    listen: (server, address) => listenOrExplain(server, address, 'upstream', config),
  }).catch((err: unknown) => {
    throw new Error(`the example MCP server cannot start: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
  })
  process.stderr.write(`example MCP server (${mode}) on ${example.url}/mcp\n`)
  const gateway = await serve(configPath)
  const credentials = await demoCredentials(config)
  process.stderr.write(
    [
      '',
      `Wardline is listening on ${gateway.url}/mcp (audit trail: ${config.audit.output ?? 'postgres'})`,
      ...credentials.notes,
      ...tryIt(`${gateway.url}/mcp`, mode, credentials),
      `Every decision is appended to ${config.audit.output ?? 'the audit_entries table'}; Ctrl-C stops both servers.`,
      '',
    ].join('\n'),
  )
}

/**
 * The curl lines to try, per mode: a stateless server answers a bare tools/call, a stateful one
 * answers only inside a session (anything else is 400 "Server not initialized"), so there the lines
 * initialize first and carry the Mcp-Session-Id its answer returned.
 */
function tryIt(url: string, mode: ExampleMode, credentials: { headers: string; setup: string[] }): string[] {
  const curl = `curl -s ${url} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream'`
  const call = `-d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'`
  const list = `-d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'`
  if (mode !== 'stateful') {
    return [
      'Try it (a tool call, then the tool list):',
      ...credentials.setup,
      `  ${curl} \\`,
      `    ${credentials.headers} \\`,
      `    ${call}`,
      `  ${curl} \\`,
      `    ${credentials.headers} ${list}`,
    ]
  }
  const initialize = `-d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'`
  return [
    'Try it (stateful: initialize, then send the Mcp-Session-Id it answered with on every request: a tool call, the tool list):',
    ...credentials.setup,
    `  export SESSION=$(${curl} -o /dev/null -D - \\`,
    `    ${credentials.headers} \\`,
    `    ${initialize} \\`,
    `    | tr -d '\\r' | awk 'tolower($1) == "mcp-session-id:" { print $2 }')`,
    `  ${curl} \\`,
    `    ${credentials.headers} -H "mcp-session-id: $SESSION" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'`,
    `  ${curl} \\`,
    `    ${credentials.headers} -H "mcp-session-id: $SESSION" \\`,
    `    ${call}`,
    `  ${curl} \\`,
    `    ${credentials.headers} -H "mcp-session-id: $SESSION" ${list}`,
  ]
}

/** The curl headers that get alice of tenant acme in, whatever auth mode the config uses. */
async function demoCredentials(config: Config): Promise<{ headers: string; notes: string[]; setup: string[] }> {
  if (config.auth.mode === 'header') {
    return { headers: `-H 'x-wardline-identity: alice' -H 'x-wardline-tenant: acme'`, notes: [], setup: [] }
  }
  const headers = `-H "authorization: Bearer $TOKEN"`
  if (config.auth.jwt.secret === null) {
    return { headers, notes: ['Set TOKEN to a token from your identity provider (this config verifies asymmetric keys).'], setup: [] }
  }
  const token = await mintToken(config, { sub: 'alice', tenant: 'acme', ttlSeconds: 3600 })
  return {
    headers,
    notes: ['A token for alice (tenant acme), valid for 1 hour; mint others with: node dist/src/main.js token --sub bob --tenant acme'],
    setup: [`  export TOKEN=${token}`],
  }
}

main().catch((err) => {
  process.stderr.write(`wardline demo: ${String(err instanceof Error ? err.message : err)}\n`)
  process.exit(1)
})
