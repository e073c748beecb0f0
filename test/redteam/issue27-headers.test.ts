import { readFileSync } from 'node:fs'
import { type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { createLogger } from '../../src/log'
import { type RunningGateway, startGateway } from '../../src/server/compose'
import { MCP_HEADERS, as, configFrom, rpc, tempDir, toolCall } from '../helpers/harness'
import { send } from '../helpers/http-client'
import { waitFor } from '../helpers/wait'

const SECRETS = ['docs-key-5f1c', 'docs-bearer-77aa', 'down-key-0b3e', 'redir-key-9d2f', 'rotated-key-4c4c']
const INIT = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } })

/**
 * A caller trying to get another server's injected header, or to have their own copy of it reach a
 * server; and every place a header value could show: debug logs (no secrets registered with the
 * logger, so a value is caught where it is written, not masked after), audit, error bodies, /readyz,
 * /metrics, the reload's logged diff.
 */
describe('red team: per-server headers', () => {
  let docs: ExampleServer
  let redirector: Server
  let gateway: RunningGateway
  let auditFile: string
  let tree: Record<string, unknown>
  let dir: string
  const logs: string[] = []
  beforeAll(async () => {
    docs = await startExampleServer({ mode: 'stateful' })
    // An upstream that redirects every request to docs: the gateway must pass the 307 on, never follow it.
    redirector = createServer((_req, res) => res.writeHead(307, { location: `${docs.url}/mcp` }).end())
    await new Promise<void>((r) => redirector.listen(0, '127.0.0.1', r))
    const closed = createServer()
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r))
    const downPort = (closed.address() as AddressInfo).port
    await new Promise((r) => closed.close(r))
    dir = tempDir()
    auditFile = join(dir, 'audit.jsonl')
    tree = {
      listen: '127.0.0.1:0',
      log_level: 'debug',
      auth: { mode: 'header' },
      audit: { output: auditFile },
      servers: {
        docs: { url: `${docs.url}/mcp`, headers: { 'X-Api-Key': '${DOCS_TOKEN}', Authorization: `Bearer ${SECRETS[1]}` } },
        down: { url: `http://127.0.0.1:${downPort}/mcp`, headers: { 'X-Api-Key': SECRETS[2] } },
        redir: { url: `http://127.0.0.1:${(redirector.address() as AddressInfo).port}/mcp`, headers: { 'X-Api-Key': SECRETS[3] } },
      },
    }
    const stream = new PassThrough()
    stream.on('data', (c: Buffer) => logs.push(c.toString('utf8')))
    gateway = await startGateway(configFrom(tree, { DOCS_TOKEN: SECRETS[0] }, dir), {
      log: createLogger('debug', { format: 'json', stream }),
    })
  })
  afterAll(async () => {
    await gateway.shutdown()
    await docs.close()
    await new Promise((r) => redirector.close(r))
  })

  test('no client spelling of a configured header reaches the server; the configured value arrives once', async () => {
    const reply = await send(
      `${gateway.url}/mcp/docs`,
      'POST',
      {
        ...MCP_HEADERS,
        ...as('alice'),
        'X-API-KEY': 'forged-1',
        x_api_key: 'forged-2',
        'X-Api_Key': 'forged-3',
        'x-api-key': ['forged-4', 'forged-5'],
        authorization: 'Bearer forged-6',
        connection: 'x-api-key, authorization',
      },
      JSON.stringify(INIT),
    )
    expect(reply.status).toBe(200)
    const last = docs.seen.at(-1)
    expect(last?.headers['x-api-key']).toBe(SECRETS[0])
    expect(last?.headers.authorization).toBe(`Bearer ${SECRETS[1]}`)
    expect(JSON.stringify(last?.headers)).not.toContain('forged')
  })

  test("a server's header never goes to another server", async () => {
    const before = docs.seen.length
    const reply = await send(`${gateway.url}/mcp/redir`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(INIT))
    // The redirect is the client's to follow (to a URL without the gateway's headers): the gateway follows none.
    expect(reply.status).toBe(307)
    expect(docs.seen.length).toBe(before)
  })

  test('a down server answers 502 without its header value anywhere in the answer', async () => {
    const reply = await send(`${gateway.url}/mcp/down`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(toolCall('echo')))
    expect(reply.status).toBe(502)
    for (const s of SECRETS) expect(reply.body + JSON.stringify(reply.headers)).not.toContain(s)
  })

  test('/readyz and /metrics name servers, never a header value', async () => {
    const ready = await (await fetch(`${gateway.url}/readyz`)).text()
    expect(ready).toContain('down')
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
    for (const s of SECRETS) {
      expect(ready).not.toContain(s)
      expect(metrics).not.toContain(s)
    }
  })

  test('a reload that changes a header logs the change, masked', async () => {
    const servers = tree.servers as Record<string, Record<string, unknown>>
    const next = { ...tree, servers: { ...servers, docs: { ...servers.docs, headers: { 'X-Api-Key': SECRETS[4] } } } }
    expect(gateway.reload(configFrom(next, { DOCS_TOKEN: SECRETS[0] }, dir))).toEqual([])
    const reply = await send(`${gateway.url}/mcp/docs`, 'POST', { ...MCP_HEADERS, ...as('alice') }, JSON.stringify(INIT))
    expect(reply.status).toBe(200)
    expect(docs.seen.at(-1)?.headers['x-api-key']).toBe(SECRETS[4])
    expect(docs.seen.at(-1)?.headers.authorization).toBeUndefined()
    await waitFor(() => Promise.resolve(logs.some((l) => l.includes('configuration key changed'))), { what: 'the reload diff' })
  })

  test('no header value in any log line (debug) or audit entry', async () => {
    await gateway.audit.flush()
    const audit = readFileSync(auditFile, 'utf8')
    expect(audit.length).toBeGreaterThan(0)
    expect(logs.join('').length).toBeGreaterThan(0)
    for (const s of SECRETS) {
      expect(audit).not.toContain(s)
      expect(logs.join('')).not.toContain(s)
    }
  })
})
