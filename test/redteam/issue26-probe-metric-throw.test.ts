/**
 * The upstream probe runs on its own timer and sets its gauges (wardline_upstream_up…) after each
 * probe. A gauge that throws there must not end the probing: /readyz would then report the upstream
 * as it was at that moment for as long as the process lives, and the throw reach the process as an
 * unhandled rejection.
 */
import type { Gauge } from 'prom-client'
import { startHarness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

test('a probe whose gauge throws keeps probing: /readyz follows the upstream going down', async () => {
  const h = await startHarness({
    mode: 'stateless-json',
    config: { upstream_health_check: { interval_seconds: 0.1, timeout_seconds: 1 } },
  })
  const reached: unknown[] = []
  const record = (err: unknown): void => void reached.push(err)
  process.on('unhandledRejection', record)
  try {
    expect((await fetch(`${h.url}/readyz`)).status).toBe(200)
    const up = h.gateway.metrics.registry.getSingleMetric('wardline_upstream_up') as Gauge
    up.set = () => {
      throw new Error('probe gauge exploded')
    }
    await h.upstream.close()
    await waitFor(async () => (await fetch(`${h.url}/readyz`)).status === 503, {
      what: '/readyz to say the upstream is down',
      timeoutMs: 5000,
      intervalMs: 100,
    })
    expect(reached).toEqual([])
  } finally {
    process.off('unhandledRejection', record)
    await h.gateway.shutdown()
  }
})
