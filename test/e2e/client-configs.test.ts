/**
 * docs/clients.md against the real gateway: every JSON config block parses, points at the documented
 * endpoint and carries the token as a Bearer header; filled in the way its client fills it in, it
 * lists tools through a gateway; left unfilled, it gets a 401 the page's failure table names. The
 * page's MCP Inspector commands are run as written with the installed Inspector CLI.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import yaml from 'js-yaml'
import { mintToken } from '../../src/cli/token'
import { type Harness, MCP_HEADERS, rpc, startHarness } from '../helpers/harness'
import { type ServersHarness, startServersHarness } from '../helpers/servers'

const ROOT = join(__dirname, '..', '..')
const DOC = readFileSync(join(ROOT, 'docs', 'clients.md'), 'utf8')
const INSPECTOR_CLI = join(ROOT, 'node_modules', '@modelcontextprotocol', 'inspector-cli', 'build', 'cli.js')

interface Block {
  readonly lang: string
  readonly text: string
  /** The `## ` section the block sits in. */
  readonly section: string
  readonly line: number
}

function fencedBlocks(markdown: string): Block[] {
  const out: Block[] = []
  const lines = markdown.split('\n')
  let section = ''
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith('## ')) section = lines[i].slice(3)
    const open = /^```(\w*)$/.exec(lines[i])
    if (open === null) continue
    const start = i
    const body: string[] = []
    for (i++; i < lines.length && lines[i] !== '```'; i++) body.push(lines[i])
    out.push({ lang: open[1], text: body.join('\n'), section, line: start + 1 })
  }
  return out
}

const blocks = fencedBlocks(DOC)
const jsonBlocks = blocks.filter((b) => b.lang === 'json')
/** The section whose blocks point at one server of several (`/mcp/<name>`): checked against a gateway with `servers:`. */
const SEVERAL = 'Several servers behind one gateway'
const named = jsonBlocks.filter((b) => b.section !== SEVERAL).map((b) => [`${b.section} (line ${b.line})`, b] as const)
const severalNamed = jsonBlocks.filter((b) => b.section === SEVERAL).map((b) => [`${b.section} (line ${b.line})`, b] as const)

/** One server entry as a client would reach it: where, with which headers, and with what environment. */
interface Endpoint {
  readonly url: string
  readonly headers: Record<string, string>
  readonly entry: Record<string, unknown>
}

/** The server entries of a config block: VS Code's `servers`, everyone else's `mcpServers`; URL or mcp-remote bridge. */
function endpoints(config: Record<string, unknown>): Endpoint[] {
  const servers = (config.servers ?? config.mcpServers) as Record<string, Record<string, unknown>> | undefined
  if (servers === undefined) throw new Error('neither servers nor mcpServers')
  return Object.values(servers).map((entry) => {
    const env = (entry.env ?? {}) as Record<string, string>
    // What the entry's own env block defines is filled in by the bridge itself (mcp-remote reads ${VAR} from it).
    const own = (v: string) => v.replace(/\$\{(\w+)\}/g, (whole, name: string) => env[name] ?? whole)
    if (typeof entry.url === 'string') return { url: entry.url, headers: (entry.headers ?? {}) as Record<string, string>, entry }
    // mcp-remote: the URL is its first positional argument, each --header "Name:value" a header (its own parsing rule).
    const args = (entry.args ?? []) as string[]
    const headers: Record<string, string> = {}
    const positional: string[] = []
    for (let i = args.indexOf('mcp-remote') + 1; i < args.length; i++) {
      if (args[i] === '--header') {
        const m = /^([A-Za-z0-9_-]+):\s*(.*)$/.exec(args[++i])
        if (m === null) throw new Error(`mcp-remote would ignore --header ${args[i]}`)
        headers[m[1]] = own(m[2])
      } else if (args[i] === '--transport') i++
      else if (!args[i].startsWith('--')) positional.push(args[i])
    }
    return { url: positional[0], headers, entry }
  })
}

/**
 * A header value as the client sends it once the user did their part: the token variable set (Claude
 * Code's ${WARDLINE_TOKEN}, Cursor's ${env:…}, VS Code's ${input:…}) or the page's placeholder replaced.
 */
function fillIn(value: string, token: string): string {
  return value.replace(/\$\{(?:env:|input:)?[\w-]+\}/g, token).replace(/^Bearer eyJ\S*replace-with-your-token\S*$/, `Bearer ${token}`)
}

let h: Harness
let token: string

beforeAll(async () => {
  h = await startHarness({ config: { auth: { mode: 'jwt', jwt: { secret: 'client-configs-test-secret-0123456789abcdef' } } } })
  token = await mintToken(h.config, { sub: 'alice', tenant: 'acme', ttlSeconds: 600 })
})

afterAll(async () => {
  await h?.close()
})

/** The documented URL with its host and port swapped for the test gateway's. */
const onGateway = (url: string): URL => {
  const u = new URL(url)
  const g = new URL(h.url)
  u.host = g.host
  return u
}

test('the page has a JSON config for each client it covers, and documents the endpoint form they use', () => {
  expect(DOC).toMatch(/`http:\/\/HOST:8080\/mcp`/)
  expect(DOC).toMatch(/`http:\/\/HOST:8080\/sse`/)
  const sections = new Set(jsonBlocks.map((b) => b.section))
  for (const client of ['Claude Code', 'Cursor', 'VS Code', 'Claude Desktop', 'MCP Inspector']) expect(sections).toContain(client)
})

test.each(named)('%s parses and points at http://HOST:8080/mcp with an Authorization: Bearer header', (_name, block) => {
  const config = JSON.parse(block.text) as Record<string, unknown>
  const found = endpoints(config)
  expect(found.length).toBeGreaterThan(0)
  for (const { url, headers } of found) {
    const u = new URL(url)
    expect([u.protocol, u.port, u.pathname, u.search]).toEqual(['http:', '8080', '/mcp', ''])
    expect(Object.keys(headers).map((k) => k.toLowerCase())).toEqual(['authorization'])
    expect(Object.values(headers)[0]).toMatch(/^Bearer \S+$/)
  }
})

/** The shape the client blocks share, loosely: enough to read what each client's format requires. */
interface Config {
  mcpServers?: Record<
    string,
    { type?: string; url?: string; headers?: Record<string, string>; command?: string; args?: string[]; env?: Record<string, string> }
  >
  servers?: Record<string, { type?: string; url?: string; headers?: Record<string, string> }>
  inputs?: unknown[]
}

test('each client block uses that client’s own format and keeps the token out where the client allows it', () => {
  const bySection = (section: string) => jsonBlocks.filter((b) => b.section === section).map((b) => JSON.parse(b.text) as Config)

  const [claudeCode] = bySection('Claude Code')
  expect(claudeCode.mcpServers?.wardline).toEqual({
    type: 'http',
    url: expect.any(String) as unknown,
    headers: { Authorization: 'Bearer ${WARDLINE_TOKEN}' },
  })

  const [cursor] = bySection('Cursor')
  expect(cursor.mcpServers?.wardline.headers).toEqual({ Authorization: 'Bearer ${env:WARDLINE_TOKEN}' })

  const [vscode] = bySection('VS Code')
  expect(vscode.mcpServers).toBeUndefined()
  expect(vscode.servers?.wardline.type).toBe('http')
  const ref = /^Bearer \$\{input:([\w-]+)\}$/.exec(vscode.servers?.wardline.headers?.Authorization ?? '')
  expect(ref).not.toBeNull()
  expect(vscode.inputs).toEqual([
    expect.objectContaining({ type: 'promptString', id: ref?.[1], password: true, description: expect.any(String) as unknown }),
  ])

  const [desktop] = bySection('Claude Desktop')
  const bridge = desktop.mcpServers?.wardline
  expect(bridge?.command).toBe('npx')
  expect(bridge?.args?.slice(0, 2)).toEqual(['-y', 'mcp-remote'])
  expect(bridge?.args).toEqual(expect.arrayContaining(['--transport', 'http-only', '--header', 'Authorization:${AUTH_HEADER}']))
  // No space inside an argument: Claude Desktop on Windows passes args to npx unquoted.
  for (const arg of bridge?.args ?? []) expect(arg).not.toMatch(/\s/)
  expect(bridge?.env?.AUTH_HEADER).toMatch(/^Bearer \S+$/)
})

test.each(named)('%s, filled in as its client fills it in, lists the tools through a real gateway', async (_name, block) => {
  for (const { url, headers } of endpoints(JSON.parse(block.text) as Record<string, unknown>)) {
    const sent = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, fillIn(v, token)]))
    const transport = new StreamableHTTPClientTransport(onGateway(url), { requestInit: { headers: sent } })
    const client = new Client({ name: 'client-configs-test', version: '1.0.0' })
    await client.connect(transport)
    try {
      const { tools } = await client.listTools()
      expect(tools.map((t) => t.name)).toContain('echo')
    } finally {
      await client.close()
    }
  }
  const audit = await h.audit()
  expect(audit.some((e) => e.method === 'tools/list' && e.identity === 'alice' && e.tenant === 'acme')).toBe(true)
})

test.each(named)('%s, with its variables left unexpanded, gets a 401 that the failure table lists', async (_name, block) => {
  const failures = DOC.slice(DOC.indexOf('## Common failures'))
  for (const { url, headers } of endpoints(JSON.parse(block.text) as Record<string, unknown>)) {
    const res = await fetch(onGateway(url), { method: 'POST', headers: { ...MCP_HEADERS, ...headers }, body: JSON.stringify(rpc('ping')) })
    expect(res.status).toBe(401)
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer realm="wardline"/)
    const { error } = (await res.json()) as { error: { message: string } }
    expect(failures).toContain(error.message.replace(/^Unauthorized: /, ''))
  }
})

test('the page’s allowed_origins block lets the Inspector web UI in from the browser, and no other page', async () => {
  const block = blocks.find((b) => b.lang === 'yaml' && b.section === 'MCP Inspector')
  const lists = yaml.load(block?.text ?? '') as { allowed_origins: string[]; allowed_hosts: string[] }
  expect(lists.allowed_origins).toEqual(['http://localhost:6274'])
  const browser = await startHarness({
    config: { ...lists, auth: { mode: 'jwt', jwt: { secret: 'client-configs-test-secret-0123456789abcdef' } } },
  })
  try {
    const url = `${browser.url}/mcp`
    const preflight = await fetch(url, {
      method: 'OPTIONS',
      headers: {
        origin: 'http://localhost:6274',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, mcp-protocol-version',
      },
    })
    expect(preflight.status).toBe(204)
    expect(preflight.headers.get('access-control-allow-origin')).toBe('http://localhost:6274')
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/authorization/i)

    const init = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'inspector', version: '1' } })
    const post = (origin: string) =>
      fetch(url, { method: 'POST', headers: { ...MCP_HEADERS, origin, authorization: `Bearer ${token}` }, body: JSON.stringify(init) })
    const ok = await post('http://localhost:6274')
    expect(ok.status).toBe(200)
    expect(ok.headers.get('access-control-expose-headers')).toMatch(/mcp-session-id/)
    await ok.arrayBuffer()

    const evil = await post('http://evil.example')
    expect(evil.status).toBe(403)
    const { error } = (await evil.json()) as { error: { message: string } }
    expect(error.message).toBe('Forbidden: origin not allowed')
    expect(DOC).toContain(`403 \`${error.message}\``)
  } finally {
    await browser.close()
  }
})

/** A command line from the page split as a POSIX shell would split it (quotes, $VAR), for execFile. */
function shellWords(line: string, vars: Record<string, string>): string[] {
  const words: string[] = []
  for (const m of line.matchAll(/"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+)/g)) {
    const expand = (s: string) => s.replace(/\$(\w+)|\$\{(\w+)\}/g, (_, a: string, b: string) => vars[a ?? b] ?? '')
    words.push(m[2] !== undefined ? m[2] : expand(m[1] ?? m[3]))
  }
  return words
}

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * One of the page's `npx @modelcontextprotocol/inspector --cli …` lines, run with the installed CLI in
 * place of npx (from docs/, as the page says for version 1.0.3), the URL pointed at the test gateway.
 */
function runInspector(line: string, vars: Record<string, string>): Promise<Run> {
  const words = shellWords(line, vars)
  expect(words.slice(0, 3)).toEqual(['npx', '@modelcontextprotocol/inspector', '--cli'])
  const args = words.slice(2).map((w) => (/^https?:\/\//.test(w) ? onGateway(w).href : w))
  return new Promise((resolve) => {
    execFile(process.execPath, [INSPECTOR_CLI, ...args], { cwd: join(ROOT, 'docs'), timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr })
    })
  })
}

const inspectorLines = blocks
  .filter((b) => b.lang === 'sh' && b.section === 'MCP Inspector')
  .flatMap((b) => b.text.split('\n'))
  .filter((l) => l.startsWith('npx @modelcontextprotocol/inspector --cli '))

test('the page’s Inspector CLI commands list tools and call one through a real gateway with a bearer token', async () => {
  const list = inspectorLines.find((l) => l.includes('--method tools/list'))
  const call = inspectorLines.find((l) => l.includes('--method tools/call'))
  expect(list).toBeDefined()
  expect(call).toBeDefined()

  const listed = await runInspector(list ?? '', { WARDLINE_TOKEN: token })
  expect(listed.code).toBe(0)
  expect((JSON.parse(listed.stdout) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toContain('echo')

  const called = await runInspector(call ?? '', { WARDLINE_TOKEN: token })
  expect(called.code).toBe(0)
  expect(JSON.parse(called.stdout)).toEqual({ content: [{ type: 'text', text: 'hi' }] })

  const calls = (await h.audit()).filter((e) => e.method === 'tools/call' && e.tool === 'echo')
  expect(calls.at(-1)).toMatchObject({ identity: 'alice', tenant: 'acme', decision: 'allow' })
})

test('the same Inspector command reaches the legacy SSE endpoint', async () => {
  const list = inspectorLines.find((l) => l.includes('--method tools/list')) ?? ''
  const run = await runInspector(list.replace('/mcp --transport http', '/sse --transport sse'), { WARDLINE_TOKEN: token })
  expect(run.code).toBe(0)
  expect(run.stdout).toContain('"name": "echo"')
})

test('without a token the Inspector CLI fails with the 401 the page shows, and never gets a tool list', async () => {
  const list = inspectorLines.find((l) => l.includes('--method tools/list')) ?? ''
  const run = await runInspector(list.replace(/ --header "[^"]*"/, ''), {})
  expect(run.code).toBe(1)
  expect(run.stdout).toBe('')
  const line = run.stderr.split('\n').find((l) => l.startsWith('Failed to connect to MCP server:'))
  expect(line).toBe(
    'Failed to connect to MCP server: Streamable HTTP error: Error POSTing to endpoint: {"jsonrpc":"2.0","id":null,"error":{"code":401,"message":"Unauthorized: missing bearer token"}}',
  )
  expect(DOC).toContain(line)
  // An empty $WARDLINE_TOKEN (the variable unset in the shell) leaves "Bearer" alone: also refused, not anonymous.
  const empty = await runInspector(list, {})
  expect(empty.code).toBe(1)
  expect(empty.stderr).toMatch(/"code":401/)
})

test('every --header on the page’s command lines sends the token as Authorization: Bearer', () => {
  const lines = blocks.filter((b) => b.lang === 'sh').flatMap((b) => b.text.split('\n'))
  const headers = lines.flatMap((l) => [...l.matchAll(/--header "([^"]*)"/g)].map((m) => m[1]))
  expect(headers.length).toBeGreaterThanOrEqual(5)
  for (const header of headers) expect(header).toBe('Authorization: Bearer $WARDLINE_TOKEN')
  const add = lines.find((l) => l.startsWith('claude mcp add '))
  expect(add).toMatch(
    /^claude mcp add --transport http wardline http:\/\/127\.0\.0\.1:8080\/mcp --header "Authorization: Bearer \$WARDLINE_TOKEN"$/,
  )
})

describe('several servers: the per-server URLs', () => {
  const secret = 'client-configs-test-secret-0123456789abcdef'
  let g: ServersHarness
  let own: string
  beforeAll(async () => {
    g = await startServersHarness({ docs: {}, tickets: {} }, { auth: { mode: 'jwt', jwt: { secret } } })
    own = await mintToken(g.config, { sub: 'alice', tenant: 'acme', ttlSeconds: 600 })
  })
  afterAll(async () => {
    await g?.close()
  })

  test('the section shows each client format: .mcp.json, Cursor, VS Code and the mcp-remote bridge', () => {
    expect(severalNamed).toHaveLength(4)
    expect(DOC).toMatch(/`http:\/\/HOST:8080\/mcp\/<name>`/)
  })

  test.each(severalNamed)('%s: one entry per server at /mcp/<name>, each listing tools through the gateway', async (_name, block) => {
    const found = endpoints(JSON.parse(block.text) as Record<string, unknown>)
    expect(found.map(({ url }) => new URL(url).pathname)).toEqual(['/mcp/docs', '/mcp/tickets'])
    for (const { url, headers } of found) {
      expect(Object.keys(headers).map((k) => k.toLowerCase())).toEqual(['authorization'])
      const target = new URL(url)
      target.host = new URL(g.url).host
      const sent = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, fillIn(v, own)]))
      const client = new Client({ name: 'client-configs-test', version: '1.0.0' })
      await client.connect(new StreamableHTTPClientTransport(target, { requestInit: { headers: sent } }))
      try {
        expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo')
      } finally {
        await client.close()
      }
    }
  })

  test('a path naming no server gets the 404 the page and its failure table name', async () => {
    for (const path of ['/mcp', '/mcp/Docs', '/mcp/nope']) {
      const res = await fetch(`${g.url}${path}`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: `Bearer ${own}` },
        body: JSON.stringify(rpc('ping')),
      })
      expect(res.status).toBe(404)
      const { error } = (await res.json()) as { error: { message: string } }
      expect(DOC.slice(DOC.indexOf('## Common failures'))).toContain(`404 \`${error.message}\``)
      expect(DOC.slice(DOC.indexOf(`## ${SEVERAL}`), DOC.indexOf('## Common failures'))).toContain(`404 \`${error.message}\``)
    }
  })
})
