import { join } from 'node:path'
import { openAudit } from '../../src/audit/open'
import { openAuth } from '../../src/auth/open'
import { openBudget } from '../../src/budget/open'
import type { Config } from '../../src/config/types'
import { createLogger } from '../../src/log'
import { type SharedStages, buildChain, routesOf, routeStages, sharedStages } from '../../src/server/chain'
import { gatewayMetrics } from '../../src/server/compose'
import { configFrom, tempDir } from '../helpers/harness'

const LEADING = [
  'http',
  'auth',
  'revocation',
  'session',
  'legacy-session',
  'concurrency',
  'path',
  'jsonrpc',
  'mcp-headers',
  'concurrency-verdict',
  'audit-reservation',
]

const log = createLogger('error', { format: 'json' })

/** The stages every route shares, opened from `config` as compose.ts opens them (memory store, JSONL audit). */
async function shared(config: Config): Promise<{ stages: SharedStages; close: () => Promise<void> }> {
  const metrics = gatewayMetrics(false)
  const audit = await openAudit(config, null, null, metrics.audit, log)
  const budget = await openBudget(config, null, undefined, metrics.budget, log)
  const auth = await openAuth(config, null, metrics.revocations, log)
  return {
    stages: sharedStages(config, { auth, audit, budget }, metrics, log),
    close: () => audit.trail.close(),
  }
}

function tree(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { upstream: 'http://127.0.0.1:1', auth: { mode: 'header' }, audit: { output: join(tempDir(), 'audit.jsonl') }, ...extra }
}

describe('buildChain: the stage order of one route', () => {
  test('with policy, list filter, budget and tool results: shared stages first, then the route’s own, the verdict last', async () => {
    const config = configFrom(
      tree({
        features: { budget_enforcement: true },
        budget: { requests_per_window: 10, window_seconds: 60 },
        policy: { default: 'allow', rules: [{ identity: 'alice', tool: 'add', effect: 'deny' }] },
        tool_refusals: 'result',
      }),
    )
    const { stages, close } = await shared(config)
    try {
      expect(buildChain(routesOf(config)[0], stages, routeStages()).map((s) => s.name)).toEqual([
        ...LEADING,
        'legacy-streams',
        'policy',
        'list-filter',
        'budget',
        'policy-verdict',
      ])
    } finally {
      await close()
    }
  })

  test('without policy or budget the chain ends with the audit reservation', async () => {
    const config = configFrom(tree())
    const { stages, close } = await shared(config)
    try {
      expect(buildChain(routesOf(config)[0], stages, routeStages()).map((s) => s.name)).toEqual(LEADING)
    } finally {
      await close()
    }
  })

  test('a legacy (sse) server’s route rewrites its endpoint events before any other reader; a streamable one’s does not', async () => {
    const config = configFrom({
      ...tree(),
      upstream: undefined,
      servers: { old: { url: 'http://127.0.0.1:1/sse', transport: 'sse' }, new: { url: 'http://127.0.0.1:1/mcp' } },
    })
    const { stages, close } = await shared(config)
    try {
      const [old, fresh] = routesOf(config).map((route) => buildChain(route, stages, routeStages()).map((s) => s.name))
      expect(old).toEqual([...LEADING.slice(0, 3), 'legacy-endpoint', ...LEADING.slice(3)])
      expect(fresh).toEqual(LEADING)
    } finally {
      await close()
    }
  })

  test('two routes over the same shared stages share those objects and make their own policy stages', async () => {
    const config = configFrom(tree({ features: { budget_enforcement: true }, policy: { default: 'deny', rules: [], filter_lists: false } }))
    const { stages, close } = await shared(config)
    try {
      const open = routesOf(config)[0]
      const closed: typeof open = { ...open, policy: null, toolRefusals: 'http' }
      const a = buildChain(open, stages, routeStages())
      const b = buildChain(closed, stages, routeStages())
      expect(a.slice(0, LEADING.length)).toEqual(b.slice(0, LEADING.length))
      expect(a.slice(LEADING.length).map((s) => s.name)).toEqual(['policy', 'budget', 'policy-verdict'])
      expect(b.slice(LEADING.length).map((s) => s.name)).toEqual(['budget'])
    } finally {
      await close()
    }
  })
})
