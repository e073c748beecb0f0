import { request } from 'node:http'
import { startRawUpstream } from '../e2e/raw-upstream'
import { as, readJsonl, startHarness } from '../helpers/harness'

describe('shutdown with a stream still open', () => {
  test('a stream cut at the end of the grace period still gets its audit entry before the trail closes', async () => {
    const upstream = await startRawUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message"}\n\n') // then stays open
    })
    const h = await startHarness({ upstreamUrl: upstream.url, config: { shutdown_grace_seconds: 0.2 } })
    try {
      const firstEvent = new Promise<void>((resolve, reject) => {
        const req = request(`${h.url}/mcp`, { method: 'GET', headers: { accept: 'text/event-stream', ...as('alice') } }, (res) => {
          res.once('data', () => resolve())
          res.on('error', () => undefined)
        })
        req.on('error', reject)
        req.end()
      })
      await firstEvent
      await h.gateway.shutdown()
      const entries = readJsonl(h.auditFile)
      expect(entries).toHaveLength(1)
      expect(entries[0]).toMatchObject({
        method: 'GET', identity: 'alice', decision: 'passthrough', status: 200,
        reason: 'connection closed by the gateway at shutdown (shutdown_grace_seconds passed)',
      })
    } finally {
      await h.upstream.close()
      await upstream.close()
    }
  })
})
