import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { startGateway } from '../../src/server/compose'
import { silentLogger } from '../../src/log'
import { MCP_HEADERS, as, configFrom, startHarness, tempDir, toolCall } from '../helpers/harness'

describe('the gateway lifecycle', () => {
  test('shutdown twice is one shutdown; /readyz says shutting_down while it drains', async () => {
    const h = await startHarness({ config: { shutdown_delay_seconds: 0.3 } })
    try {
      const first = h.gateway.shutdown()
      const second = h.gateway.shutdown()
      expect(second).toBe(first)
      const ready = await fetch(`${h.url}/readyz`)
      expect(ready.status).toBe(503)
      expect(await ready.json()).toEqual({ status: 'shutting_down' })
      await first
    } finally {
      await h.upstream.close()
    }
  })

  test('a reload that arrives while shutting down changes nothing', async () => {
    const h = await startHarness({
      config: { shutdown_delay_seconds: 0.3, policy: { default: 'allow', rules: [] } },
    })
    try {
      const stopping = h.gateway.shutdown()
      const denyAll = configFrom({ ...h.tree, policy: { default: 'deny', rules: [] } }, {}, tempDir())
      expect(h.gateway.reload(denyAll)).toEqual([])
      // Still serving during shutdown_delay_seconds, with the policy it had.
      const res = await fetch(h.url, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo', { message: 'still allowed' })),
      })
      expect(res.status).not.toBe(403)
      await res.text()
      await stopping
    } finally {
      await h.upstream.close()
    }
  })

  test('a listener that cannot bind fails startup with WL_LISTEN_FAILED and the OS error as its cause, and the port taker is untouched', async () => {
    const taker = createServer((_req, res) => res.end('taken'))
    await new Promise<void>((resolve) => taker.listen(0, '127.0.0.1', resolve))
    const { port } = taker.address() as AddressInfo
    try {
      const dir = tempDir()
      const config = configFrom(
        { listen: `127.0.0.1:${port}`, upstream: 'http://127.0.0.1:9', auth: { mode: 'header' }, audit: { output: `${dir}/audit.jsonl` } },
        {},
        dir,
      )
      await expect(startGateway(config, { log: silentLogger() })).rejects.toMatchObject({
        code: 'WL_LISTEN_FAILED',
        cause: { code: 'EADDRINUSE' },
      })
      expect(await (await fetch(`http://127.0.0.1:${port}/`)).text()).toBe('taken')
    } finally {
      await new Promise<void>((resolve) => taker.close(() => resolve()))
    }
  })
})
