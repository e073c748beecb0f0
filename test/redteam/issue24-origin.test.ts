/**
 * Red team (loopback and same-origin Origins by default): spellings that are not
 * a loopback origin, or not the gateway's own, stay 403 on a loopback gateway with the default
 * `allowed_origins: []`. A guard for any change to the origin check.
 */
import { type Harness, MCP_HEADERS, as, rpc, startHarness } from '../helpers/harness'
import { send } from '../helpers/http-client'

let h: Harness
beforeAll(async () => {
  h = await startHarness({ mode: 'stateless-json' })
})
afterAll(async () => {
  await h.close()
})

function status(origin: string, host?: string): Promise<number> {
  const headers: Record<string, string> = { ...as('alice'), ...MCP_HEADERS, origin }
  if (host !== undefined) headers.host = host
  return send(`${h.url}/mcp`, 'POST', headers, JSON.stringify(rpc('tools/list'))).then((r) => r.status)
}

test.each([
  'null',
  'http://localhost.:6274',
  'http://127.0.0.1.nip.io',
  'http://127.0.0.1.nip.io:6274',
  'http://localhost.evil.example',
  'http://[::ffff:127.0.0.1]:6274',
  'http://[0:0:0:0:0:0:0:1]:6274',
  'http://127.1',
  'http://2130706433',
  'http://0x7f.0.0.1',
  'http://user@localhost:6274',
  'http://localhost:6274@evil.example',
  'http://localhost:6274/',
  'http://localhost:6274, http://evil.example',
  'http://evil.example, http://localhost:6274',
  'ws://localhost:6274',
  'file://',
  'http://localhost:6274\\@evil.example',
])('Origin %j is refused on a loopback gateway with the default list', async (origin) => {
  expect(await status(origin)).toBe(403)
})

test.each(['http://localhost:6274', 'http://LOCALHOST:6274', 'http://127.0.0.1', 'http://[::1]:8080'])(
  'loopback Origin %j is accepted',
  async (origin) => {
    expect(await status(origin)).toBe(200)
  },
)

test('a rebinding page is not its own origin: Host and Origin both evil.example', async () => {
  expect(await status('http://evil.example:8080', 'evil.example:8080')).toBe(403)
  expect(await status('http://localhost.:8080', 'localhost.:8080')).toBe(403)
  expect(await status('http://127.0.0.1.nip.io:8080', '127.0.0.1.nip.io:8080')).toBe(403)
})
