/**
 * `npm start`: the example MCP server and the gateway in front of it, on the embedded default
 * (in-memory budgets, JSONL audit), configured by ./wardline.yaml.
 */
import { loadConfig } from '../src/config/load'
import { serve } from '../src/cli/serve'
import { mintToken } from '../src/cli/token'
import type { Config } from '../src/config/types'
import { type ExampleMode, startExampleServer } from './mcp-server'

async function main(): Promise<void> {
  const configPath = process.env.WARDLINE_CONFIG ?? 'wardline.yaml'
  const config = loadConfig(configPath)
  const upstream = new URL(config.upstream.url)
  // Stateless by default so one curl can call a tool; WARDLINE_EXAMPLE_MODE=stateful shows sessions.
  const mode = (process.env.WARDLINE_EXAMPLE_MODE ?? 'stateless-json') as ExampleMode
  const example = await startExampleServer({ port: Number(upstream.port || 80), host: upstream.hostname, mode })
  process.stderr.write(`example MCP server (${mode}) on ${example.url}/mcp\n`)
  const gateway = await serve(configPath)
  const credentials = await demoCredentials(config)
  process.stderr.write(
    [
      '',
      `Wardline is listening on ${gateway.url}/mcp (audit trail: ${config.audit.output ?? 'postgres'})`,
      ...credentials.notes,
      'Try it (a tool call, then the tool list):',
      ...credentials.setup,
      `  curl -s ${gateway.url}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\`,
      `    ${credentials.headers} \\`,
      `    -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}'`,
      `  curl -s ${gateway.url}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\`,
      `    ${credentials.headers} -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'`,
      `Every decision is appended to ${config.audit.output ?? 'the audit_entries table'}; Ctrl-C stops both servers.`,
      '',
    ].join('\n'),
  )
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
