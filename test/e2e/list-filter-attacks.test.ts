/**
 * Attacks on list filtering: what a caller could do to see a list entry it may not
 * use, or to make the gateway stall, fail, mis-audit or break a list answer that should pass. The
 * upstream is trusted but may be sloppy (odd content types, chunking, CRLF SSE, escapes, duplicate
 * keys, a byte order mark), so most tests put a hand-written upstream behind a real gateway and read
 * the answer the way the official SDK client does (fetch, or the SDK client itself).
 *
 * Each defect the red team found (/work/reports/redteam-lists.md) is fixed and kept here as a test;
 * the limits left (duplicate keys whose last copy hides nothing) are in docs/policy.md, "Limits".
 */
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { dirname } from 'node:path'
import { gzipSync } from 'node:zlib'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import type { AuditEntry } from '../../src/audit/entry'
import { type Harness, MCP_HEADERS, as, configFrom, startHarness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'
import { type RawUpstream, gate, startRawUpstream } from './raw-upstream'

/** bob (tenant acme) may call `add` only; a tenant under `acme-*` may also call `echo`. */
const POLICY = {
  default: 'deny',
  rules: [
    { identity: '*', tool: 'add', effect: 'allow' },
    { identity: '*', tenant: 'acme-*', tool: 'echo', effect: 'allow' },
    { identity: '*', tool: 'add*', effect: 'allow' },
    { identity: '*', method: 'prompts/*', tool: 'public_*', effect: 'allow' },
    { identity: '*', method: 'resources/*', tool: 'example://public/*', effect: 'allow' },
    // The list calls themselves (judged with an empty target) are allowed; their entries are filtered.
    { identity: '*', method: 'prompts/list', tool: '*', effect: 'allow' },
    { identity: '*', method: 'resources/list', tool: '*', effect: 'allow' },
    { identity: '*', method: 'resources/templates/list', tool: '*', effect: 'allow' },
  ],
}

const TOOLS = ['echo', 'add', 'whoami'].map((name) => ({ name, inputSchema: { type: 'object' } }))

/** A JSON-RPC answer to tools/list with every tool of TOOLS, as text. */
function toolsAnswer(id: unknown = 1, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ jsonrpc: '2.0', id, result: { tools: TOOLS, ...extra } })
}

type Json = Record<string, unknown>

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...as('bob'), ...MCP_HEADERS, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}

const LIST = { jsonrpc: '2.0', id: 1, method: 'tools/list' }

/** The tool names of a tools/list answer's result. */
function toolNames(message: unknown): string[] {
  return ((message as { result: { tools: Array<{ name: string }> } }).result.tools ?? []).map((t) => t.name)
}

/**
 * The events of an SSE text as an EventSource client dispatches them (WHATWG HTML §9.2.6, as the
 * SDK's parser does it): a leading BOM skipped, lines ending in CRLF, LF or CR, data lines joined with
 * LF, an event dispatched at a blank line when it has data, an unfinished last event dropped.
 */
function sseEvents(text: string): Array<{ data: string; id?: string; event?: string }> {
  const out: Array<{ data: string; id?: string; event?: string }> = []
  let data: string[] = []
  let id: string | undefined
  let event: string | undefined
  const lines = text.replace(/^\ufeff/, '').split(/\r\n|\r|\n/)
  lines.pop() // what follows the last line end: an unfinished line, never dispatched
  for (const line of lines) {
    if (line === '') {
      if (data.length > 0) out.push({ data: data.join('\n'), id, event })
      data = []
      id = undefined
      event = undefined
      continue
    }
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    const value = colon < 0 ? '' : line.slice(colon + (line.charCodeAt(colon + 1) === 0x20 ? 2 : 1))
    if (field === 'data') data.push(value)
    else if (field === 'id') id = value
    else if (field === 'event') event = value
  }
  return out
}

/** An SDK client that speaks Streamable HTTP through the gateway as `identity`. */
async function sdkClient(h: Harness, identity = 'bob', tenant = 'acme'): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as(identity, tenant) } })
  const client = new Client({ name: 'agent', version: '1.0.0' })
  await client.connect(transport)
  return client
}

/** The tool names bob's SDK client lists through the gateway. */
async function listedBy(h: Harness): Promise<string[]> {
  const client = await sdkClient(h)
  try {
    return (await client.listTools()).tools.map((t) => t.name)
  } finally {
    await client.close()
  }
}

interface FakeMcp extends RawUpstream {
  /** The standalone GET stream, once the client opened it (only when `getStream` was given). */
  readonly stream: Promise<ServerResponse>
}

/**
 * A hand-written MCP server, just enough for the SDK client: it answers `initialize` (JSON),
 * notifications (202) and DELETE itself, and every other request through `answer`. With `getStream`
 * it holds a GET open as the standalone stream, with that Content-Type (null: none at all);
 * otherwise a GET gets 405, as from a server without one.
 */
async function fakeMcp(
  answer: (message: Json, res: ServerResponse, stream: Promise<ServerResponse>) => void | Promise<void>,
  getStream: { contentType: string | null } | null = null,
): Promise<FakeMcp> {
  let opened!: (res: ServerResponse) => void
  const stream = new Promise<ServerResponse>((resolve) => {
    opened = resolve
  })
  const upstream = await startRawUpstream(async (req, res, seen) => {
    if (req.method === 'GET') {
      if (getStream === null) return void res.writeHead(405).end()
      res.writeHead(200, getStream.contentType === null ? {} : { 'content-type': getStream.contentType })
      res.flushHeaders()
      return opened(res)
    }
    if (req.method !== 'POST') return void res.writeHead(200).end()
    const message = JSON.parse(seen.body) as Json
    if (message.id === undefined) return void res.writeHead(202).end()
    if (message.method === 'initialize') {
      const result = {
        protocolVersion: (message.params as Json).protocolVersion,
        capabilities: { tools: {}, prompts: {}, resources: {} },
        serverInfo: { name: 'sloppy', version: '1.0.0' },
      }
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }))
    }
    await answer(message, res, stream)
  })
  return { ...upstream, stream }
}

/** Audit entries of list methods, as [method, reason]. */
function listReasons(entries: readonly AuditEntry[]): Array<[string, string]> {
  return entries.filter((e) => e.method.includes('/list')).map((e) => [e.method, e.reason ?? ''])
}

let h: Harness | undefined
const upstreams: Array<{ close(): Promise<void> }> = []
afterEach(async () => {
  await h?.close()
  h = undefined
  for (const u of upstreams.splice(0)) await u.close()
})

async function behind<T extends { url: string; close(): Promise<void> }>(upstream: T, config: Json = {}): Promise<T> {
  upstreams.push(upstream)
  h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY, ...config } })
  return upstream
}

describe('answers a client reads but the filter could not', () => {
  test('a JSON list answer that starts with a byte order mark is filtered (fetch and the SDK skip the BOM)', async () => {
    await behind(
      await fakeMcp((m, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(`\ufeff${toolsAnswer(m.id)}`)),
    )
    // JSON.parse refuses the BOM, so the filter passes the text as it came; the SDK's response.json()
    // decodes UTF-8 the WHATWG way, which drops it, and reads every tool.
    expect(await listedBy(h!)).toEqual(['add'])
  })

  test('an SSE list answer whose stream starts with a byte order mark is filtered', async () => {
    await behind(
      await fakeMcp((m, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(`\ufeffdata: ${toolsAnswer(m.id)}\n\n`)
      }),
    )
    // The gateway's SSE reader sees `\uFEFFdata: …`, not a data line; the client's TextDecoderStream drops the BOM.
    expect(await listedBy(h!)).toEqual(['add'])
  })

  test.each([
    ['without a Content-Type', null],
    ['as text/plain', 'text/plain'],
  ])('a list answer on a GET stream sent %s is filtered (the SDK reads any GET body as SSE)', async (_what, contentType) => {
    // A sloppy server that answers POSTs with 202 and sends every answer on its standalone stream,
    // which it opens with no SSE Content-Type. The SDK client reads a GET body as SSE whatever its
    // type; the gateway reads only bodies typed text/event-stream or application/json.
    await behind(
      await fakeMcp(
        async (m, res, stream) => {
          res.writeHead(202).end()
          ;(await stream).write(`data: ${toolsAnswer(m.id)}\n\n`)
        },
        { contentType },
      ),
    )
    expect(await listedBy(h!)).toEqual(['add'])
  })

  test('each of two gated list calls with the same id gets its own count in the audit', async () => {
    const resources = (n: number): Json => ({
      resources: [
        { uri: `example://public/${n}`, name: 'p' },
        { uri: 'example://secret/x', name: 's' },
      ],
    })
    await behind(
      await startRawUpstream((_q, res) => {
        const answer = [1, 2].map((n) => ({ jsonrpc: '2.0', id: 7, result: resources(n) }))
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer))
      }),
    )
    const batch = [1, 2].map(() => ({ jsonrpc: '2.0', id: 7, method: 'resources/list' }))
    const answer = (await (await post(h!.url, batch)).json()) as Array<{ result: { resources: Array<{ uri: string }> } }>
    expect(answer.map((m) => m.result.resources.map((r) => r.uri))).toEqual([['example://public/1'], ['example://public/2']])
    // Both counts land on element 0 (noteHidden matches by id and method), element 1 says nothing hid.
    const entries = (await h!.audit()).filter((e) => e.method === 'resources/list')
    expect(entries.map((e) => [e.request_id.split('/')[1], e.reason])).toEqual([
      ['0', 'list filtered by policy: 1 of 2 resources hidden'],
      ['1', 'list filtered by policy: 1 of 2 resources hidden'],
    ])
  })
})

describe('reloads while a list answer is on its way', () => {
  /** A reload the way `wardline serve` does it on SIGHUP, from the harness's tree with `policy` replaced. */
  function reloadPolicy(policy: unknown): string[] {
    return h!.gateway.reload(configFrom({ ...h!.tree, policy }, {}, dirname(h!.auditFile)))
  }

  test.each([
    ['filter_lists: false', { ...POLICY, filter_lists: false }],
    ['a policy that can deny nothing', { default: 'allow', rules: [] }],
  ])('a JSON list answer in flight when a reload turns filtering off (%s) still reaches the client', async (_what, policy) => {
    const answerNow = gate()
    const upstream = await behind(
      await startRawUpstream(async (_q, res) => {
        await answerNow.wait
        res.writeHead(200, { 'content-type': 'application/json' }).end(toolsAnswer(1))
      }),
    )
    const pending = post(h!.url, LIST)
    await waitFor(() => upstream.seen.length === 1, { what: 'the list call at the upstream' })
    expect(reloadPolicy(policy)).toEqual([])
    answerNow.open()
    // The old chain's filter reads `policies.current`, which the reload set to null: a TypeError,
    // reported as a 502 "upstream failed before answering".
    const res = await pending
    expect(res.status).toBe(200)
    const entry = (await h!.audit()).find((e) => e.method === 'tools/list')
    expect(entry?.decision).not.toBe('error')
  })

  test('a GET stream opened before a reload that turns filtering off is not cut by the next list answer', async () => {
    const upstream = await behind(await fakeMcp(() => undefined, { contentType: 'text/event-stream' }))
    const res = await fetch(`${h!.url}/mcp`, { headers: { ...as('bob'), accept: 'text/event-stream' } })
    const stream = await upstream.stream
    expect(reloadPolicy({ ...POLICY, filter_lists: false })).toEqual([])
    stream.end(`data: ${toolsAnswer(9)}\n\n`)
    // Today the old chain's filter throws (policies.current is null) and the stream is cut.
    const text = await res.text().catch(() => '')
    expect(sseEvents(text).map((e) => toolNames(JSON.parse(e.data)))).toEqual([['echo', 'add', 'whoami']])
    await waitFor(async () => (await h!.audit()).some((e) => e.method === 'GET'), { what: 'the GET stream audit entry' })
    expect((await h!.audit()).find((e) => e.method === 'GET')?.decision).toBe('passthrough')
  })

  test('a GET stream opened while nothing could be denied lists by the rules a later reload brings (docs/policy.md)', async () => {
    const upstream = await behind(await fakeMcp(() => undefined, { contentType: 'text/event-stream' }), {
      policy: { default: 'allow', rules: [] },
    })
    const res = await fetch(`${h!.url}/mcp`, { headers: { ...as('bob'), accept: 'text/event-stream' } })
    const stream = await upstream.stream
    expect(reloadPolicy(POLICY)).toEqual([])
    // The stream kept the chain it started with, which had no list filter at all.
    stream.end(`data: ${toolsAnswer(9)}\n\n`)
    const events = sseEvents(await res.text())
    expect(events.map((e) => toolNames(JSON.parse(e.data)))).toEqual([['add']])
  })
})

describe('an upstream that routes answers by the caller-chosen id', () => {
  /**
   * An official-SDK server, stateful, whose tools/list waits on I/O (an aggregator asking its own
   * backends, say) and whose `add` is slow. The SDK routes each answer to the stream of the latest
   * POST that carried its id, so a caller that reuses the id of its pending tools/list in a
   * tools/call gets the list on the tools/call's stream, which no list reader watches.
   */
  async function slowListServer(
    listGate: Promise<void>,
  ): Promise<{ url: string; listCalled: Promise<void>; callCalled: Promise<void>; close(): Promise<void> }> {
    let listCalled!: () => void
    let callCalled!: () => void
    const listSeen = new Promise<void>((r) => (listCalled = r))
    const callSeen = new Promise<void>((r) => (callCalled = r))
    const sessions = new Map<string, StreamableHTTPServerTransport>()
    const never = new Promise<void>(() => undefined)
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const id = req.headers['mcp-session-id']
      let transport = typeof id === 'string' ? sessions.get(id) : undefined
      const handle = async (): Promise<void> => {
        if (transport === undefined) {
          const created = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (sid) => void sessions.set(sid, created),
          })
          transport = created
          const mcp = new Server({ name: 'aggregator', version: '1.0.0' }, { capabilities: { tools: {} } })
          mcp.setRequestHandler(ListToolsRequestSchema, async () => {
            listCalled()
            await listGate
            return { tools: TOOLS }
          })
          mcp.setRequestHandler(CallToolRequestSchema, async () => {
            callCalled()
            await never
            return { content: [] }
          })
          await mcp.connect(created)
        }
        await transport.handleRequest(req, res)
      }
      handle().catch((err) => res.writeHead(500).end(String(err)))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as AddressInfo
    return {
      url: `http://127.0.0.1:${port}`,
      listCalled: listSeen,
      callCalled: callSeen,
      close: async () => {
        for (const t of sessions.values()) await t.close().catch(() => undefined)
        server.closeAllConnections()
        await new Promise<void>((resolve) => server.close(() => resolve()))
      },
    }
  }

  test('a tools/call that reuses the id of a pending tools/list does not carry the unfiltered list', async () => {
    const listGate = gate()
    const upstream = await behind(await slowListServer(listGate.wait))
    const init = await post(h!.url, {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'attacker', version: '1' } },
    })
    await init.text()
    const session = { 'mcp-session-id': init.headers.get('mcp-session-id') ?? '', 'mcp-protocol-version': '2025-06-18' }
    await (await post(h!.url, { jsonrpc: '2.0', method: 'notifications/initialized' }, session)).text()

    const abort = new AbortController()
    const list = fetch(`${h!.url}/mcp`, {
      method: 'POST',
      headers: { ...as('bob'), ...MCP_HEADERS, ...session },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }),
      signal: abort.signal,
    }).catch(() => null)
    await upstream.listCalled
    // Reusing the pending list's id is refused before it reaches the upstream…
    const reused = await post(h!.url, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'add', arguments: {} } }, session)
    expect(reused.status).toBe(409)
    expect(((await reused.json()) as Json).error).toMatchObject({ code: -32600 })
    // …and the list itself arrives filtered on its own stream.
    listGate.open()
    const listed = await list
    const events = sseEvents((await listed?.text()) ?? '')
      .map((e) => JSON.parse(e.data) as Json)
      .filter((m) => (m.result as Json | undefined)?.tools !== undefined)
    expect(events.map(toolNames)).toEqual([['add']])
    abort.abort()
    // Once the list is answered its id is free again.
    const again = await post(h!.url, { jsonrpc: '2.0', id: 7, method: 'ping' }, session)
    expect(again.status).toBe(200)
  })
})

describe('entries listed that the gateway would refuse to call', () => {
  test('a resource URI or template not in normal form, or a tool name with a control character, is not listed', async () => {
    // Each matches an allow glob as raw text (`example://public/*`, `add*`), but the call for it is
    // refused with 400 (jsonrpc/parse.ts: resourceUriProblem, control characters), and a server that
    // resolves `example://public/../secret/key` reads example://secret/key.
    await behind(
      await startRawUpstream((_q, res) => {
        const answer = [
          { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'add' }, { name: 'add\u0007' }] } },
          { jsonrpc: '2.0', id: 2, result: { resources: [{ uri: 'example://public/a' }, { uri: 'example://public/../secret/key' }] } },
          {
            jsonrpc: '2.0',
            id: 3,
            result: {
              resourceTemplates: [{ uriTemplate: 'example://public/{id}' }, { uriTemplate: 'example://public/%2e%2e/secret/{id}' }],
            },
          },
        ]
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer))
      }),
    )
    const batch = ['tools/list', 'resources/list', 'resources/templates/list'].map((method, i) => ({ jsonrpc: '2.0', id: i + 1, method }))
    const [t, r, rt] = (await (await post(h!.url, batch)).json()) as Json[]
    const read = await post(h!.url, { jsonrpc: '2.0', id: 4, method: 'resources/read', params: { uri: 'example://public/../secret/key' } })
    expect(read.status).toBe(400) // so listing it offers the caller something it cannot use
    expect([
      toolNames(t),
      (r.result as { resources: Json[] }).resources.map((x) => x.uri),
      (rt.result as { resourceTemplates: Json[] }).resourceTemplates.map((x) => x.uriTemplate),
    ]).toEqual([['add'], ['example://public/a'], ['example://public/{id}']])
  })
})

describe('an audit reason that grows with the stream', () => {
  test("a legacy /sse stream's audit reason stays bounded however many lists the caller asks for on it", async () => {
    h = await startHarness({ mode: 'stateful', config: { policy: POLICY } })
    const transport = new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers: as('bob') } })
    const client = new Client({ name: 'legacy-agent', version: '1.0.0' })
    await client.connect(transport)
    // tools/list is not budgeted: each call appends ~45 characters to the stream's reason, held in
    // memory for the stream's life and written as one audit line (here 200 calls: ~9 KB).
    for (let i = 0; i < 200; i++) expect((await client.listTools()).tools.map((t) => t.name)).toEqual(['add'])
    await client.close()
    const entry = await waitFor(async () => (await h!.audit()).find((e) => e.method === 'GET'), { what: 'the /sse stream entry' })
    expect(entry.reason).toContain('tools hidden')
    expect(entry.reason?.length ?? 0).toBeLessThan(1000)
  })
})

describe('attacks the filter withstands', () => {
  test('escaped keys and names (`resul\\u0074`, `too\\u006cs`, `n\\u0061me`, `wh\\u006fami`) are read as what they spell', async () => {
    const answer =
      '{"jsonrpc":"2.0","id":1,"resul\\u0074":{"too\\u006cs":[{"n\\u0061me":"wh\\u006fami","inputSchema":{}},' +
      '{"name":"\\u0061dd","inputSchema":{}},{"name":"\\u0065cho","inputSchema":{}}],"nextCursor":"c\\u00e9"}}'
    await behind(await startRawUpstream((_q, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(answer)))
    const message = (await (await post(h!.url, LIST)).json()) as Json
    expect(toolNames(message)).toEqual(['add'])
    expect((message.result as Json).nextCursor).toBe('cé')
  })

  test('names full of JSON syntax, escapes and non-ASCII are cut out exactly, kept entries byte for byte', async () => {
    const names = ['add"]},{"name":"x', 'add\\', 'add{[', 'add\u2028', 'add😀', 'whoami"', '"add', 'echo\\"]']
    const entries = names.map((name) => `{ "name" : ${JSON.stringify(name)} ,\r\n  "inputSchema": {"type":"object","d":"]}\\"["} }`)
    const answer = `\r\n {\r\n "jsonrpc": "2.0", "id": 1,\r\n "result": {\r\n  "tools": [\r\n   ${entries.join(' ,\r\n   ')}\r\n  ],\r\n  "nextCursor": "n"\r\n }\r\n}\r\n`
    await behind(await startRawUpstream((_q, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(answer)))
    const text = await (await post(h!.url, LIST)).text()
    const kept = names.filter((n) => n.startsWith('add'))
    expect(toolNames(JSON.parse(text))).toEqual(kept)
    for (const name of kept) expect(text).toContain(entries[names.indexOf(name)])
    expect(text.startsWith('\r\n {\r\n "jsonrpc": "2.0", "id": 1,')).toBe(true)
  })

  test('an answer where nothing is hidden keeps its exact bytes, odd whitespace and invalid UTF-8 included', async () => {
    const body = Buffer.concat([
      Buffer.from('{ "jsonrpc":"2.0" ,"id":1, "result" : {"tools" : [ {"name":"add","description":"'),
      Buffer.from([0xff, 0xc3]),
      Buffer.from('","inputSchema":{}} ] } }\n'),
    ])
    await behind(await startRawUpstream((_q, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(body)))
    expect(Buffer.from(await (await post(h!.url, LIST)).arrayBuffer()).equals(body)).toBe(true)
  })

  test.each([
    'application/json',
    'Application/JSON',
    'application/json;charset=utf-8',
    'APPLICATION/JSON; charset="UTF-8"',
    'text/event-stream',
    'text/event-stream; charset=utf-8',
    'TEXT/EVENT-STREAM',
  ])('a list answer sent as %s is filtered', async (type) => {
    const sse = type.toLowerCase().startsWith('text/')
    await behind(
      await startRawUpstream((_q, res) => {
        res.writeHead(200, { 'content-type': type }).end(sse ? `data: ${toolsAnswer(1)}\n\n` : toolsAnswer(1))
      }),
    )
    const text = await (await post(h!.url, LIST)).text()
    expect(toolNames(JSON.parse(sse ? sseEvents(text)[0].data : text))).toEqual(['add'])
  })

  test.each([
    ['LF', '\n'],
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ])('an SSE list event with %s line ends, split across data lines, with id, event, retry and comments, is filtered', async (_n, eol) => {
    const pretty = JSON.stringify(JSON.parse(toolsAnswer(1)), null, 1).split('\n')
    const event = [
      ': keep-alive',
      'id: 42',
      'event: message',
      'retry: 5000',
      ...pretty.map((line, i) => (i % 2 ? `data:${line}` : `data: ${line}`)),
    ]
    await behind(
      await startRawUpstream((_q, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' }).end(`${event.join(eol)}${eol}${eol}: after${eol}${eol}`)
      }),
    )
    const events = sseEvents(await (await post(h!.url, LIST)).text())
    expect(events.map((e) => [e.id, e.event, toolNames(JSON.parse(e.data))])).toEqual([['42', 'message', ['add']]])
  })

  describe('an SSE list event split across upstream chunks', () => {
    /** One event, with a four-byte character in a kept name, sent in two chunks cut at `?split=`, or one byte a chunk. */
    const EVENT = Buffer.from(
      `id: 1\r\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'whoami' }, { name: 'add😀' }, { name: 'echo' }] } })}\r\n\r\n`,
    )
    let upstream: RawUpstream
    let gateway: Harness

    beforeAll(async () => {
      upstream = await startRawUpstream(async (req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        const split = new URL(req.url ?? '/', 'http://x').searchParams.get('split')
        // Each write is its own HTTP chunk, so the gateway's reader gets the bytes cut exactly here,
        // however TCP groups them.
        const cuts = split === 'bytes' ? [...EVENT.keys()].slice(1) : [Number(split)]
        let from = 0
        for (const at of [...cuts, EVENT.length]) {
          if (!res.write(EVENT.subarray(from, at))) await new Promise((r) => res.once('drain', r))
          from = at
        }
        res.end()
      })
      gateway = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
    })
    afterAll(async () => {
      await gateway.close()
      await upstream.close()
    })

    async function namesAt(split: string): Promise<Array<[string | undefined, string[]]>> {
      const res = await fetch(`${gateway.url}/mcp?split=${split}`, {
        method: 'POST',
        headers: { ...as('bob'), ...MCP_HEADERS },
        body: JSON.stringify(LIST),
      })
      return sseEvents(await res.text()).map((e) => [e.id, toolNames(JSON.parse(e.data))])
    }

    test('at every byte offset, one at a time', async () => {
      const wrong: string[] = []
      for (let at = 1; at < EVENT.length; at++) {
        const got = await namesAt(String(at))
        if (JSON.stringify(got) !== JSON.stringify([['1', ['add😀']]])) wrong.push(`${at}: ${JSON.stringify(got)}`)
      }
      expect(wrong).toEqual([])
    })

    test('one byte per chunk', async () => {
      expect(await namesAt('bytes')).toEqual([['1', ['add😀']]])
    })
  })

  test('a batch with a notification, a duplicate id and a non-list call is filtered by shape, element by element', async () => {
    await behind(
      await startRawUpstream((_q, res) => {
        const answer = [
          { jsonrpc: '2.0', id: 1, result: { tools: TOOLS } },
          { jsonrpc: '2.0', id: 1, result: { prompts: [{ name: 'public_a' }, { name: 'private_b' }] } },
          { jsonrpc: '2.0', id: 2, result: { content: [{ type: 'text', text: '{"tools":[{"name":"whoami"}]}' }] } },
        ]
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer))
      }),
    )
    const batch = [
      { jsonrpc: '2.0', method: 'tools/list' },
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { jsonrpc: '2.0', id: 1, method: 'prompts/list' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'add', arguments: {} } },
    ]
    const answer = (await (await post(h!.url, batch)).json()) as Json[]
    expect(toolNames(answer[0])).toEqual(['add'])
    expect(((answer[1].result as Json).prompts as Json[]).map((p) => p.name)).toEqual(['public_a'])
    expect(answer[2]).toEqual({ jsonrpc: '2.0', id: 2, result: { content: [{ type: 'text', text: '{"tools":[{"name":"whoami"}]}' }] } })
    expect(listReasons(await h!.audit())).toEqual([
      ['prompts/list', 'list filtered by policy: 1 of 2 prompts hidden'],
      ['tools/list,tools/list', 'list filtered by policy: 2 of 3 tools hidden'],
    ])
  })

  test('resource and template lists are judged by URI, and tenant globs by the caller’s tenant', async () => {
    await behind(
      await startRawUpstream((_q, res) => {
        const answer = [
          { jsonrpc: '2.0', id: 1, result: { tools: TOOLS } },
          { jsonrpc: '2.0', id: 2, result: { resources: [{ uri: 'example://public/a' }, { uri: 'example://secret/b' }] } },
          {
            jsonrpc: '2.0',
            id: 3,
            result: { resourceTemplates: [{ uriTemplate: 'example://public/{id}' }, { uriTemplate: 'example://{path}' }] },
          },
        ]
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer))
      }),
    )
    const batch = ['tools/list', 'resources/list', 'resources/templates/list'].map((method, i) => ({ jsonrpc: '2.0', id: i + 1, method }))
    for (const [tenant, tools] of [
      ['acme', ['add']],
      ['acme-eu', ['echo', 'add']],
      ['acme*', ['add']],
    ] as const) {
      const res = await post(h!.url, batch, as('bob', tenant))
      const [t, r, rt] = (await res.json()) as Json[]
      expect([tenant, toolNames(t)]).toEqual([tenant, tools])
      expect((r.result as { resources: Json[] }).resources).toEqual([{ uri: 'example://public/a' }])
      expect((rt.result as { resourceTemplates: Json[] }).resourceTemplates).toEqual([{ uriTemplate: 'example://public/{id}' }])
    }
  })

  test('a GET stream is filtered on any path and query (legacy /sse, /mcp?…), with the caller’s Last-Event-ID', async () => {
    const upstream = await behind(
      await startRawUpstream((_q, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' }).end(`id: 3\ndata: ${toolsAnswer(1)}\n\n`)
      }),
    )
    for (const path of ['/sse', '/mcp?sessionId=x&x=1', '/messages', '/other/stream']) {
      const res = await fetch(`${h!.url}${path}`, { headers: { ...as('bob'), accept: 'text/event-stream', 'last-event-id': '2' } })
      expect([path, sseEvents(await res.text()).map((e) => toolNames(JSON.parse(e.data)))]).toEqual([path, [['add']]])
    }
    expect(upstream.seen.every((s) => s.headers['last-event-id'] === '2')).toBe(true)
  })

  test("a caller's Accept-Encoding never reaches the upstream, and an answer compressed anyway is refused, not passed unread", async () => {
    const upstream = await behind(
      await startRawUpstream((req, res) => {
        const forced = req.url?.includes('force') === true
        if (!forced && req.headers['accept-encoding'] === undefined) {
          return void res.writeHead(200, { 'content-type': 'application/json' }).end(toolsAnswer(1))
        }
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(gzipSync(toolsAnswer(1)))
      }),
    )
    const asked = await post(h!.url, LIST, { 'accept-encoding': 'gzip, deflate, br' })
    expect(toolNames(await asked.json())).toEqual(['add'])
    expect(upstream.seen[0].headers['accept-encoding']).toBeUndefined()
    const forced = await fetch(`${h!.url}/mcp?force`, {
      method: 'POST',
      headers: { ...as('bob'), ...MCP_HEADERS },
      body: JSON.stringify(LIST),
    })
    expect(forced.status).toBe(502)
    expect(await forced.text()).not.toContain('whoami')
    expect((await h!.audit()).at(-1)?.reason).toContain('content-encoded (gzip)')
  })

  test('a list past 16 MiB is refused with 502 (JSON) or cut (SSE), never passed on unread; one just below is filtered', async () => {
    const big = (n: number): string =>
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        result: {
          tools: Array.from({ length: n }, (_, i) => ({ name: i === n - 1 ? 'add' : `hidden_${i}`, description: 'x'.repeat(160) })),
        },
      })
    const over = big(90_000) // ~17 MB
    const under = big(60_000) // ~11.5 MB
    expect(Buffer.byteLength(over)).toBeGreaterThan(16 * 1024 * 1024)
    await behind(
      await startRawUpstream((req, res) => {
        const sse = req.url?.includes('sse') === true
        const body = req.url?.includes('over') === true ? over : under
        res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'application/json' })
        res.end(sse ? `data: ${body}\n\n` : body)
      }),
    )
    const at = (q: string): Promise<Response> =>
      fetch(`${h!.url}/mcp?${q}`, { method: 'POST', headers: { ...as('bob'), ...MCP_HEADERS }, body: JSON.stringify(LIST) })
    const json = await at('over')
    expect(json.status).toBe(502)
    expect(await json.text()).not.toContain('hidden_')
    const sse = await at('over-sse')
    const cut = await sse.text().catch(() => '')
    expect(cut).not.toContain('hidden_')
    expect(toolNames(await (await at('under')).json())).toEqual(['add'])
    const reasons = (await h!.audit()).map((e) => e.reason ?? '')
    expect(reasons).toEqual([
      expect.stringContaining(`a JSON answer passed ${16 * 1024 * 1024} bytes`),
      expect.stringContaining('an SSE event of the answer passed'),
      'list filtered by policy: 59999 of 60000 tools hidden',
    ])
  })
})
