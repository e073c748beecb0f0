/**
 * `npm start`: the example MCP server and the gateway in front of it, on the embedded default
 * (in-memory budgets, JSONL audit), configured by ./wardline.yaml.
 */
import { loadConfig } from '../src/config/load'
import { serve } from '../src/cli/serve'
import { startExampleServer } from './mcp-server'

async function main(): Promise<void> {
  const configPath = process.env.WARDLINE_CONFIG ?? 'wardline.yaml'
  const config = loadConfig(configPath)
  const upstream = new URL(config.upstream.url)
  const example = await startExampleServer({ port: Number(upstream.port || 80), host: upstream.hostname })
  process.stderr.write(`example MCP server on ${example.url}/mcp\n`)
  const gateway = await serve(configPath)
  process.stderr.write(
    [
      '',
      `Wardline is listening on ${gateway.url}/mcp (audit trail: ${config.audit.output ?? 'postgres'})`,
      'Try it:',
      `  curl -s ${gateway.url}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\`,
      `    -H 'x-wardline-identity: alice' -H 'x-wardline-tenant: acme' \\`,
      `    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'`,
      '',
    ].join('\n'),
  )
}

main().catch((err) => {
  process.stderr.write(`wardline demo: ${String(err instanceof Error ? err.message : err)}\n`)
  process.exit(1)
})
