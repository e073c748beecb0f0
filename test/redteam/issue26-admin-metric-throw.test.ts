/**
 * An admin action is audited like a proxied call: exactly one entry, and none of it unaudited. The
 * entry's metric is counted before the entry is handed to the trail; a count that throws must not
 * cost the entry of an action that already ran (a revocation made, a budget reset), nor keep the
 * queue slot reserved for it.
 */
import { startHarness } from '../helpers/harness'

const TOKEN = 'admin-token-for-the-metric-test-0123456789'

test('a revocation whose entry metric throws is still audited once, and the slot it reserved is given back', async () => {
  const h = await startHarness({
    mode: 'stateless-json',
    config: { admin: { listen: '127.0.0.1:0', token: '${ADMIN_TOKEN}' } },
    env: { ADMIN_TOKEN: TOKEN },
  })
  const reached: unknown[] = []
  const record = (err: unknown): void => void reached.push(err)
  process.on('unhandledRejection', record)
  try {
    const metrics = h.gateway.metrics.audit
    const count = metrics.countEntry.bind(metrics)
    metrics.countEntry = (decision, tenant, tool) => {
      if (tool?.includes('mallory')) throw new Error('entry metric exploded')
      count(decision, tenant, tool)
    }
    const res = await fetch(`${h.gateway.adminUrl}/revocations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ identity: 'mallory', tenant: 'acme' }),
    })
    expect(res.status).toBe(201)
    await res.text()
    // The action ran: mallory is revoked.
    expect((await h.gateway.revocations.list()).some((r) => JSON.stringify(r).includes('mallory'))).toBe(true)
    const entries = (await h.audit()).filter((e) => e.method === 'admin/revocations.create')
    expect(entries).toHaveLength(1)
    expect(h.gateway.audit.writers.every((w) => w.reservedEntries === 0)).toBe(true)
    expect(reached).toEqual([])
  } finally {
    process.off('unhandledRejection', record)
    await h.close()
  }
})
