/**
 * An upstream URL that already ends with the path clients call (`http://host:3001/mcp`, as most
 * servers' READMEs print it): the gateway appends each request's path to the upstream's, so every call
 * goes to `/mcp/mcp`. check-config and startup say so, with the URL to write instead
 * (config/warnings.ts), and the warning is exactly right: through a real gateway, the URL it names
 * fails and the one it suggests works.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { upstreamPathWarning } from '../../src/config/warnings'
import { killServed, runCli, startServe } from '../helpers/cli'
import { MCP_HEADERS, as, rpc, startHarness, tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

afterEach(() => killServed())

function configFile(upstream: string): string {
  const file = join(tempDir(), 'wardline.yaml')
  writeFileSync(
    file,
    `listen: 127.0.0.1:0\nupstream: ${upstream}\nauth: { mode: header }\naudit: { output: stdout }\nupstream_health_check: { enabled: false }\n`,
  )
  return file
}

const WARNING =
  "upstream http://127.0.0.1:3001/mcp ends with /mcp, the path clients call: the gateway appends each request's path to the upstream's, " +
  'so a call to <gateway>/mcp goes to http://127.0.0.1:3001/mcp/mcp and gets 404; write upstream: http://127.0.0.1:3001 ' +
  '(keep it only if clients call the gateway at / itself)'

test('check-config: valid (exit 0, ok), and a warning on stderr naming the URL to write instead', () => {
  const file = configFile('http://127.0.0.1:3001/mcp')
  expect(runCli(['check-config', '--config', file])).toEqual({ code: 0, stdout: `${file}: ok\n`, stderr: `${file}: warning: ${WARNING}\n` })
  // Written with a trailing slash it is the same URL (the slash is dropped), and the same mistake.
  expect(runCli(['check-config', '--config', configFile('http://127.0.0.1:3001/mcp/')]).stderr).toContain(WARNING)
})

test('check-config: an upstream without the client path gets no warning', () => {
  for (const upstream of [
    'http://127.0.0.1:3001',
    'http://127.0.0.1:3001/base',
    'http://127.0.0.1:3001/mcp-server',
    'http://127.0.0.1:3001/mcp/v2',
  ]) {
    const file = configFile(upstream)
    expect(runCli(['check-config', '--config', file])).toEqual({ code: 0, stdout: `${file}: ok\n`, stderr: '' })
  }
})

test('the suggestion keeps a base path, and covers the legacy /sse endpoint', () => {
  expect(upstreamPathWarning('https://tools.example.com/api/mcp')).toContain(
    'a call to <gateway>/mcp goes to https://tools.example.com/api/mcp/mcp and gets 404; write upstream: https://tools.example.com/api ',
  )
  expect(upstreamPathWarning('http://127.0.0.1:3001/MCP')).toBeNull() // servers match paths case-sensitively
  expect(upstreamPathWarning('http://127.0.0.1:3001/sse')).toContain(
    'a call to <gateway>/sse goes to http://127.0.0.1:3001/sse/sse and gets 404; write upstream: http://127.0.0.1:3001 ',
  )
})

test('serve logs the same warning at startup, and still starts', async () => {
  const served = await startServe(configFile('http://127.0.0.1:3001/mcp'))
  const line = await waitFor(
    () =>
      served
        .stderr()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((r) => r.message === WARNING),
    { what: 'the startup warning' },
  )
  expect(line.level).toBe('warn')
  // Still serving: a warning, not a refusal to start.
  expect((await fetch(`${served.url}/healthz`)).status).toBe(200)
  await served.stop()
})

test('the warning is right: through a real gateway the /mcp upstream answers 404, the URL it suggests answers', async () => {
  const initialize = rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } })
  const post = (url: string): Promise<Response> =>
    fetch(`${url}/mcp`, { method: 'POST', headers: { ...as('alice'), ...MCP_HEADERS }, body: JSON.stringify(initialize) })
  // The example server serves MCP at /mcp only, as most servers do.
  const direct = await startHarness({ mode: 'stateless-json' })
  try {
    const doubled = await startHarness({ mode: 'stateless-json', upstreamUrl: `${direct.upstream.url}/mcp` })
    try {
      expect((await post(doubled.url)).status).toBe(404)
      expect((await doubled.audit()).at(-1)).toMatchObject({ status: 404 })
    } finally {
      await doubled.close()
    }
    const suggested = /write upstream: (\S+) /.exec(upstreamPathWarning(`${direct.upstream.url}/mcp`) ?? '')?.[1]
    expect(suggested).toBe(direct.upstream.url)
    expect((await post(direct.url)).status).toBe(200)
  } finally {
    await direct.close()
  }
})
