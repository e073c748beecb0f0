import { type RawUpstream, startRawUpstream } from '../e2e/raw-upstream'
import { type Harness, MCP_HEADERS, as, metricSample, rpc, startHarness, toolCall } from '../helpers/harness'

/** The value of one labelled sample in the gateway's own /metrics text, 0 when absent. */
function sample(h: Harness, name: string, labels: string): Promise<number> {
  return metricSample(h.url, `${name}{${labels}}`)
}

describe('request metrics count requests, not audit entries', () => {
  let h: Harness
  let upstream: RawUpstream
  beforeAll(async () => {
    // Answers any body, batches included, with 200 and an empty JSON-RPC batch answer.
    upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('[]')
    })
    h = await startHarness({
      upstreamUrl: upstream.url,
      config: { policy: { default: 'allow', rules: [{ identity: '*', tool: 'add', effect: 'deny' }] } },
    })
  })
  afterAll(async () => {
    await h.close()
    await upstream.close()
  })

  test('a forwarded batch of five tool calls and a ping is one request, with five gated entries and one for the rest', async () => {
    const batch = [1, 2, 3, 4, 5].map((i) => toolCall('echo', { message: `m${i}` }, i))
    const res = await fetch(h.url, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('alice') },
      body: JSON.stringify([...batch, rpc('ping', undefined, 6)]),
    })
    expect(res.status).toBe(200)
    await res.text()
    await h.gateway.audit.flush()

    expect(await sample(h, 'wardline_requests_total', 'decision="allow"')).toBe(1)
    expect(await sample(h, 'wardline_request_duration_seconds_count', 'decision="allow"')).toBe(1)
    expect(await sample(h, 'wardline_audit_entries_total', 'decision="allow"')).toBe(5)
    expect(await sample(h, 'wardline_audit_entries_total', 'decision="passthrough"')).toBe(1)
    expect(await sample(h, 'wardline_requests_total', 'decision="passthrough"')).toBe(0)
  })

  test('a refused batch is one request and one entry, with the refusal as its decision', async () => {
    const before = await sample(h, 'wardline_requests_total', 'decision="deny"')
    const res = await fetch(h.url, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...as('bob') },
      body: JSON.stringify([toolCall('echo', { message: 'x' }, 1), toolCall('add', { a: 1, b: 2 }, 2)]),
    })
    expect(res.status).toBe(403)
    await res.text()
    expect(await sample(h, 'wardline_requests_total', 'decision="deny"')).toBe(before + 1)
    expect(await sample(h, 'wardline_audit_entries_total', 'decision="deny"')).toBe(before + 1)
  })
})
