/**
 * The server side of the conformance suite's fixtures (each scenario's "Server Implementation
 * Requirements": test_* tools, test:// resources, test_* prompts, logging, subscriptions), built with
 * the official SDK and its loopback app (createMcpExpressApp on 127.0.0.1, which validates Host), with
 * sessions, so sampling and elicitation can reach the client. Only for test/e2e/conformance.test.ts:
 * the reference the gateway is compared with.
 */
import { randomUUID } from 'node:crypto'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { completable } from '@modelcontextprotocol/sdk/server/completable.js'
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js'
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { ElicitResultSchema, SubscribeRequestSchema, UnsubscribeRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import { z } from 'zod'

/** A 1×1 PNG. */
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=='

/** A WAV file: 44-byte header, 8 silent 8-bit mono samples at 8 kHz. */
function wav(): string {
  const samples = 8
  const b = Buffer.alloc(44 + samples, 0x80)
  b.write('RIFF', 0)
  b.writeUInt32LE(36 + samples, 4)
  b.write('WAVEfmt ', 8)
  b.writeUInt32LE(16, 16)
  b.writeUInt16LE(1, 20)
  b.writeUInt16LE(1, 22)
  b.writeUInt32LE(8000, 24)
  b.writeUInt32LE(8000, 28)
  b.writeUInt16LE(1, 32)
  b.writeUInt16LE(8, 34)
  b.write('data', 36)
  b.writeUInt32LE(samples, 40)
  return b.toString('base64')
}

/** The fixture tools' own pace between notifications (what the conformance scenarios describe), not a test's wait. */
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

function fixtures(): McpServer {
  const mcp = new McpServer(
    { name: 'wardline-conformance-fixtures', version: '1.0.0' },
    { capabilities: { logging: {}, completions: {}, resources: { subscribe: true } } },
  )
  const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] })
  mcp.registerTool('test_simple_text', { description: 'Simple text' }, () => text('This is a simple text response for testing.'))
  mcp.registerTool('test_image_content', { description: 'An image' }, () => ({
    content: [{ type: 'image' as const, data: PNG, mimeType: 'image/png' }],
  }))
  mcp.registerTool('test_audio_content', { description: 'Audio' }, () => ({
    content: [{ type: 'audio' as const, data: wav(), mimeType: 'audio/wav' }],
  }))
  mcp.registerTool('test_embedded_resource', { description: 'An embedded resource' }, () => ({
    content: [
      {
        type: 'resource' as const,
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
      },
    ],
  }))
  mcp.registerTool('test_multiple_content_types', { description: 'Text, image and resource' }, () => ({
    content: [
      { type: 'text' as const, text: 'Multiple content types test:' },
      { type: 'image' as const, data: PNG, mimeType: 'image/png' },
      {
        type: 'resource' as const,
        resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' },
      },
    ],
  }))
  mcp.registerTool('test_tool_with_logging', { description: 'Logs three times' }, async (extra) => {
    for (const [i, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
      if (i > 0) await sleep(50)
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } })
    }
    return text('Logging test completed')
  })
  mcp.registerTool('test_tool_with_progress', { description: 'Reports progress' }, async (extra) => {
    const progressToken = extra._meta?.progressToken
    for (const [i, progress] of [0, 50, 100].entries()) {
      if (i > 0) await sleep(50)
      if (progressToken !== undefined) {
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } })
      }
    }
    return text('Progress test completed')
  })
  mcp.registerTool('test_error_handling', { description: 'Always fails' }, () => {
    throw new Error('This tool intentionally returns an error for testing')
  })
  mcp.registerTool(
    'test_sampling',
    { description: 'Asks the client to sample', inputSchema: { prompt: z.string() } },
    async ({ prompt }) => {
      const answer = await mcp.server.createMessage({
        messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
        maxTokens: 100,
      })
      return text(`LLM response: ${answer.content.type === 'text' ? answer.content.text : answer.content.type}`)
    },
  )
  const elicit = async (params: unknown) => mcp.server.request({ method: 'elicitation/create', params } as never, ElicitResultSchema)
  mcp.registerTool('test_elicitation', { description: 'Asks the user', inputSchema: { message: z.string() } }, async ({ message }) => {
    const answer = await elicit({
      message,
      requestedSchema: {
        type: 'object',
        properties: {
          username: { type: 'string', description: "User's response" },
          email: { type: 'string', description: "User's email address" },
        },
        required: ['username', 'email'],
      },
    })
    return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)
  })
  mcp.registerTool('test_elicitation_sep1034_defaults', { description: 'Elicitation with defaults' }, async () => {
    const answer = await elicit({
      message: 'Defaults for every primitive type',
      requestedSchema: {
        type: 'object',
        properties: {
          name: { type: 'string', default: 'John Doe' },
          age: { type: 'integer', default: 30 },
          score: { type: 'number', default: 95.5 },
          status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
          verified: { type: 'boolean', default: true },
        },
      },
    })
    return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)
  })
  mcp.registerTool('test_elicitation_sep1330_enums', { description: 'Elicitation with every enum form' }, async () => {
    const answer = await elicit({
      message: 'Every enum variant',
      requestedSchema: {
        type: 'object',
        properties: {
          untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
          titledSingle: {
            type: 'string',
            oneOf: [
              { const: 'value1', title: 'First Option' },
              { const: 'value2', title: 'Second Option' },
              { const: 'value3', title: 'Third Option' },
            ],
          },
          legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
          untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
          titledMulti: {
            type: 'array',
            items: {
              anyOf: [
                { const: 'value1', title: 'First Choice' },
                { const: 'value2', title: 'Second Choice' },
                { const: 'value3', title: 'Third Choice' },
              ],
            },
          },
        },
      },
    })
    return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)
  })

  mcp.registerResource('static-text', 'test://static-text', { description: 'Static text', mimeType: 'text/plain' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }))
  mcp.registerResource('static-binary', 'test://static-binary', { description: 'Static binary', mimeType: 'image/png' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }],
  }))
  mcp.registerResource('watched-resource', 'test://watched-resource', { description: 'Subscribable', mimeType: 'text/plain' }, (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched.' }],
  }))
  mcp.registerResource(
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { description: 'Data by id', mimeType: 'application/json' },
    (uri, { id }) => ({
      contents: [
        {
          uri: uri.href,
          mimeType: 'application/json',
          text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${String(id)}` }),
        },
      ],
    }),
  )
  const subscriptions = new Set<string>()
  mcp.server.setRequestHandler(SubscribeRequestSchema, (request) => {
    subscriptions.add(request.params.uri)
    return {}
  })
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, (request) => {
    subscriptions.delete(request.params.uri)
    return {}
  })

  mcp.registerPrompt('test_simple_prompt', { description: 'Simple' }, () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
  }))
  mcp.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'Two arguments',
      argsSchema: { arg1: completable(z.string(), (v) => ['paris', 'park', 'party'].filter((c) => c.startsWith(v))), arg2: z.string() },
    },
    ({ arg1, arg2 }) => ({
      messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }],
    }),
  )
  mcp.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'An embedded resource', argsSchema: { resourceUri: z.string() } },
    ({ resourceUri }) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'resource',
            resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
          },
        },
        { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
      ],
    }),
  )
  mcp.registerPrompt('test_prompt_with_image', { description: 'An image' }, () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
      { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
    ],
  }))
  return mcp
}

/** express (the SDK's dependency) ships no types here: the app is typed by what this file uses. */
interface ExpressApp {
  all(path: string, handler: (req: IncomingMessage & { body?: unknown }, res: ServerResponse) => Promise<void>): void
  listen(port: number, host: string, ready: () => void): Server
}

export interface FixtureServer {
  /** http://127.0.0.1:<port> (the MCP endpoint is /mcp). */
  readonly url: string
  close(): Promise<void>
}

export async function startFixtureServer(): Promise<FixtureServer> {
  const app = createMcpExpressApp({ host: '127.0.0.1' }) as unknown as ExpressApp
  const sessions = new Map<string, StreamableHTTPServerTransport>()
  app.all('/mcp', async (req, res) => {
    const id = req.headers['mcp-session-id']
    let transport = typeof id === 'string' ? sessions.get(id) : undefined
    if (transport === undefined) {
      if (req.method !== 'POST' || typeof id === 'string') {
        res.writeHead(typeof id === 'string' ? 404 : 400, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no such session' } }))
        return
      }
      const created = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => void sessions.set(sid, created),
      })
      created.onclose = () => {
        if (created.sessionId !== undefined) sessions.delete(created.sessionId)
      }
      await fixtures().connect(created)
      transport = created
    }
    await transport.handleRequest(req, res, req.body)
  })
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const t of sessions.values()) await t.close().catch(() => undefined)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
