/** The budget's response fields next to an upstream that sends its own. */
import { startRawUpstream } from '../e2e/raw-upstream'
import { MCP_HEADERS, as, rpc, startHarness, toolCall } from '../helpers/harness'

test('the gateway\'s RateLimit fields replace an upstream\'s own, so a client never sees two "identity" items', async () => {
  const upstream = await startRawUpstream((_req, res) => {
    res.writeHead(200, {
      'content-type': 'application/json',
      'ratelimit-policy': '"identity";q=1000;w=3600',
      ratelimit: '"identity";r=999;t=3599',
      'x-upstream': 'kept',
      constructor: 'kept too',
    })
    res.end(JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } }))
  })
  const gw = await startHarness({
    upstreamUrl: upstream.url,
    config: { features: { budget_enforcement: true }, budget: { requests_per_window: 5, window_seconds: 60 } },
  })
  try {
    const call = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(toolCall('echo', { text: 'hi' })),
    })
    expect([
      call.headers.get('ratelimit-policy'),
      call.headers.get('ratelimit'),
      call.headers.get('x-upstream'),
      call.headers.get('constructor'),
    ]).toEqual(['"identity";q=5;w=60', '"identity";r=4;t=60', 'kept', 'kept too']) // a header named like an Object member is no gateway field
    // Where the gateway sets no fields (not a tools/call), the upstream's pass through untouched.
    const list = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify(rpc('tools/list')),
    })
    expect(list.headers.get('ratelimit')).toBe('"identity";r=999;t=3599')
  } finally {
    await gw.close()
    await upstream.close()
  }
})
