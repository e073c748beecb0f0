/**
 * Completion leaks: `completion/complete` on a resource template the caller may use can return
 * values naming resources the caller may not read. Through a real gateway, the official
 * SDK client asks an official SDK server (McpServer, ResourceTemplate with completion callbacks) and
 * gets only the values whose expanded URI it may read.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js'
import { type Harness, as, startHarness } from '../helpers/harness'
import { type SdkUpstream, startSdkUpstream } from '../helpers/sdk-upstream'
import { waitFor } from '../helpers/wait'

const POLICY = {
  default: 'deny',
  rules: [
    { identity: '*', method: 'resources/read', tool: 'example://notes/secret-*', effect: 'deny' }, // rule 0
    { identity: '*', method: 'resources/read', tool: 'example://notes/*', effect: 'allow' }, // rule 1
    { identity: '*', method: 'resources/read', tool: 'example://files/private/*', effect: 'deny' }, // rule 2
    { identity: '*', method: 'resources/read', tool: 'example://files/*', effect: 'allow' }, // rule 3
  ],
}

const NOTES = ['public-1', 'secret-1', 'public-2', 'secret-2']
const FOLDERS = ['docs', 'private', 'public']
const FILES = ['a.txt', 'b.txt']

/** An official SDK server (stateful) with two completable templates; JSON answers or SSE. */
function completingServer(json: boolean): Promise<SdkUpstream> {
  const build = (): McpServer => {
    const mcp = new McpServer({ name: 'completer', version: '1.0.0' })
    const notes = new ResourceTemplate('example://notes/{id}', {
      list: undefined,
      complete: { id: (value) => NOTES.filter((n) => n.includes(value)) },
    })
    mcp.registerResource('note', notes, {}, (uri) => ({ contents: [{ uri: uri.href, text: 'note' }] }))
    const files = new ResourceTemplate('example://files/{folder}/{name}', {
      list: undefined,
      complete: {
        folder: (value) => FOLDERS.filter((f) => f.startsWith(value)),
        name: (value) => FILES.filter((f) => f.startsWith(value)),
      },
    })
    mcp.registerResource('file', files, {}, (uri) => ({ contents: [{ uri: uri.href, text: 'file' }] }))
    return mcp
  }
  return startSdkUpstream(build, { enableJsonResponse: json })
}

describe.each([
  ['SSE', false],
  ['JSON', true],
])('completion values through the gateway (%s answers)', (_mode, json) => {
  let upstream: { url: string; close(): Promise<void> }
  let h: Harness
  let client: Client
  beforeAll(async () => {
    upstream = await completingServer(json)
    h = await startHarness({ upstreamUrl: upstream.url, config: { policy: POLICY } })
    client = new Client({ name: 'agent', version: '1.0.0' })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`), { requestInit: { headers: as('bob') } }))
  })
  afterAll(async () => {
    await client.close()
    await h.close()
    await upstream.close()
  })

  const complete = (uri: string, name: string, value: string, context?: Record<string, string>) =>
    client.complete({
      ref: { type: 'ref/resource', uri },
      argument: { name, value },
      ...(context ? { context: { arguments: context } } : {}),
    })

  test('a value whose URI the caller may not read is left out, total adjusted, and the audit says how many', async () => {
    const result = await complete('example://notes/{id}', 'id', '')
    expect(result.completion).toEqual({ values: ['public-1', 'public-2'], total: 2, hasMore: false })
    const entry = (await h.audit()).filter((e) => e.method === 'completion/complete').at(-1)
    expect(entry).toMatchObject({
      decision: 'allow',
      tool: 'example://notes/{id}',
      status: 200,
      reason: 'completion filtered by policy: 2 of 4 values hidden',
    })
  })

  test('an answer where nothing is hidden is passed as the server sent it, with no reason', async () => {
    const result = await complete('example://notes/{id}', 'id', 'public')
    expect(result.completion).toEqual({ values: ['public-1', 'public-2'], total: 2, hasMore: false })
    const entry = (await h.audit()).filter((e) => e.method === 'completion/complete').at(-1)
    expect(entry?.reason).toBeUndefined()
  })

  test("the template's other variables are taken from context.arguments", async () => {
    expect((await complete('example://files/{folder}/{name}', 'name', '', { folder: 'private' })).completion.values).toEqual([])
    expect((await complete('example://files/{folder}/{name}', 'name', '', { folder: 'docs' })).completion.values).toEqual(FILES)
  })

  test('with a variable nobody gave, a value is kept only when every URI it could name may be read', async () => {
    // Each folder fixes a prefix: `private` names only denied files, the others only allowed ones.
    expect((await complete('example://files/{folder}/{name}', 'folder', '')).completion.values).toEqual(['docs', 'public'])
    // A file name without its folder could be in `private`: hidden, as nothing says it is not.
    expect((await complete('example://files/{folder}/{name}', 'name', '')).completion.values).toEqual([])
  })
})

describe('completion values on the legacy HTTP+SSE transport (answers arrive on the /sse stream)', () => {
  let h: Harness
  beforeAll(async () => {
    // The example server: example://notes/{id} completes 1, 2 and 10; the greeting prompt's name, Alice and Alan.
    const policy = {
      default: 'deny',
      rules: [
        { identity: '*', method: 'resources/read', tool: 'example://notes/1*', effect: 'deny' },
        { identity: '*', method: 'resources/read', tool: 'example://notes/*', effect: 'allow' },
        { identity: '*', method: 'prompts/get', tool: 'greeting', effect: 'allow' },
      ],
    }
    h = await startHarness({ config: { policy } })
  })
  afterAll(async () => {
    await h.close()
  })

  test('are judged against the request the client POSTed in that session', async () => {
    const client = new Client({ name: 'legacy-agent', version: '1.0.0' })
    await client.connect(new SSEClientTransport(new URL(`${h.url}/sse`), { requestInit: { headers: as('bob') } }))
    const notes = await client.complete({ ref: { type: 'ref/resource', uri: 'example://notes/{id}' }, argument: { name: 'id', value: '' } })
    const names = await client.complete({ ref: { type: 'ref/prompt', name: 'greeting' }, argument: { name: 'name', value: 'Al' } })
    await client.close()
    expect(notes.completion.values).toEqual(['2'])
    expect(names.completion.values).toEqual(['Alice', 'Alan'])
    // The stream's entry is written once the gateway has seen the client leave.
    const stream = await waitFor(async () => (await h.audit()).find((e) => e.method === 'GET'), { what: 'the /sse stream to be audited' })
    expect(stream.reason).toContain('completion filtered by policy: 2 of 3 values hidden in 1 answer')
  })
})
