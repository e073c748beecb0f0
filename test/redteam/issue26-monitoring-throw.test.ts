/**
 * /metrics and /readyz run code each feature contributes (the audit queue gauges refreshed before a
 * scrape, the /readyz fields of the revocation list and the budget). A throw there must cost that one
 * answer, with a definite status, never the process: `wardline serve` stops the gateway on an uncaught
 * exception, and a /readyz left unanswered holds a prober until its own timeout.
 */
import { MCP_HEADERS, as, startHarness, toolCall } from '../helpers/harness'

describe('a throw while answering /metrics or /readyz', () => {
  const reached: unknown[] = []
  const record = (err: unknown): void => void reached.push(err)
  beforeAll(() => {
    process.on('uncaughtException', record)
    process.on('unhandledRejection', record)
  })
  afterAll(() => {
    process.off('uncaughtException', record)
    process.off('unhandledRejection', record)
  })

  test('is answered (500 for /metrics; /readyz with the verdict of its checks), reaches nothing process-level, and the gateway keeps serving', async () => {
    const h = await startHarness({ mode: 'stateless-json' })
    try {
      h.gateway.audit.observeQueues = () => {
        throw new Error('queue gauge exploded')
      }
      h.gateway.revocations.details = () => {
        throw new Error('revocation details exploded')
      }
      const metrics = await fetch(`${h.url}/metrics`, { signal: AbortSignal.timeout(5000) })
      await metrics.text()
      expect(metrics.status).toBe(500)
      // The checks themselves pass: the probe gets their verdict, and the body says what failed.
      const ready = await fetch(`${h.url}/readyz`, { signal: AbortSignal.timeout(5000) })
      expect(ready.status).toBe(200)
      expect(await ready.json()).toMatchObject({ status: 'ready', details_error: 'revocation details exploded' })
      const call = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo', { text: 'still here' })),
      })
      expect(call.status).toBe(200)
      await call.text()
      expect(reached).toEqual([])
    } finally {
      await h.close()
    }
  })
})
