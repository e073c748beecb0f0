/**
 * A throw the gateway did not plan for (a stage, a finish hook, a metric, building the audit entry)
 * costs that one request: it is answered (500 when nothing was sent yet), audited exactly once with
 * reason_code `internal`, and every other request goes on. Real listeners on port 0, the real
 * Lifecycle and Gateway, the example MCP server upstream.
 */
import { Agent, request } from 'undici'
import { auditReservationStage } from '../../src/audit/reservation-stage'
import { jsonRpcStage } from '../../src/jsonrpc/stage'
import { AuditMetrics } from '../../src/audit/metrics'
import type { Exchange } from '../../src/pipeline/exchange'
import { CONTINUE, type Stage } from '../../src/pipeline/stage'
import { type Gateway } from '../../src/server/gateway'
import { type Lifecycle } from '../../src/server/lifecycle'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { startBareGateway } from '../helpers/bare-gateway'
import { MCP_HEADERS, as, readJsonl, startHarness, toolCall } from '../helpers/harness'

/** The tool a request calls says where it throws; anything else is an ordinary call. */
const THROWS = ['boom-stage', 'boom-async-stage', 'boom-finish', 'boom-metric', 'boom-entry'] as const

function target(ex: Exchange): string {
  return ex.calls[0]?.target ?? ''
}

/** Throws in `run` (synchronously, or after an await) for the boom-stage tools. */
const throwingStage: Stage = {
  name: 'throwing-stage',
  run(ex) {
    if (target(ex) === 'boom-stage') throw new Error('stage exploded')
    if (target(ex) === 'boom-async-stage') return Promise.reject(new Error('async stage exploded'))
    return CONTINUE
  },
}

/** Throws in `finish` for boom-finish; the stage before it must still be finished (released). */
function throwingFinish(released: Set<string>): Stage[] {
  return [
    {
      name: 'releaser',
      run: () => CONTINUE,
      finish: (ex) => void released.add(ex.requestId),
    },
    {
      name: 'throwing-finish',
      run: () => CONTINUE,
      finish(ex) {
        if (target(ex) === 'boom-finish') throw new Error('finish exploded')
        // Building the entry reads the principal: a getter that throws breaks every attempt to build it.
        if (target(ex) === 'boom-entry') {
          Object.defineProperty(ex, 'principal', {
            get() {
              throw new Error('entry building exploded')
            },
          })
        }
      },
    },
  ]
}

interface Rig {
  readonly url: string
  readonly auditFile: string
  readonly lifecycle: Lifecycle
  readonly gateway: Gateway
  readonly released: Set<string>
  readonly upstream: ExampleServer
  close(): Promise<void>
}

async function rig(): Promise<Rig> {
  const upstream = await startExampleServer({ mode: 'stateless-json' })
  const metrics = new AuditMetrics()
  // A metric that throws: counted per forwarded call, after the entries are built (in the unlabelled
  // series: the one `upstream:` has no server name).
  const count = metrics.unlabelled.countForwardedCall.bind(metrics.unlabelled)
  metrics.unlabelled.countForwardedCall = (name, outcome, seconds) => {
    if (name === 'boom-metric') throw new Error('metric exploded')
    count(name, outcome, seconds)
  }
  const released = new Set<string>()
  const bare = await startBareGateway({
    upstreamUrl: upstream.url,
    metrics,
    stages: (config, audit) => [jsonRpcStage(config.limits), auditReservationStage(audit), ...throwingFinish(released), throwingStage],
  })
  return {
    ...bare,
    released,
    upstream,
    async close() {
      await bare.close()
      await upstream.close()
    },
  }
}

describe('a throw while handling one request', () => {
  let r: Rig | null = null
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason)
  beforeAll(() => process.on('unhandledRejection', onUnhandled))
  afterAll(() => process.off('unhandledRejection', onUnhandled))
  afterEach(async () => {
    await r?.close()
    r = null
  })

  test('under 200 concurrent requests, every request is answered and audited exactly once, and the gateway keeps serving', async () => {
    r = await rig()
    const agent = new Agent({ connections: 50 })
    const tools = Array.from({ length: 200 }, (_, i) => (i % 4 === 0 ? THROWS[(i / 4) % THROWS.length] : 'echo'))
    try {
      const answers = await Promise.all(
        tools.map(async (tool, i) => {
          const res = await request(`${r!.url}/mcp`, {
            method: 'POST',
            dispatcher: agent,
            headers: { ...as('alice'), ...MCP_HEADERS },
            body: JSON.stringify(toolCall(tool, { message: `m${i}` }, i)),
          })
          const body = await res.body.text()
          return { tool, status: res.statusCode, id: String(res.headers['x-wardline-request-id']), body }
        }),
      )
      // Every request answered: a throw before anything was sent is a 500, JSON-RPC shaped; a throw
      // after the answer (finish, metric, entry) leaves the answer the client already had.
      for (const a of answers) {
        if (a.tool === 'boom-stage' || a.tool === 'boom-async-stage') {
          expect(a.status).toBe(500)
          expect(JSON.parse(a.body)).toMatchObject({ jsonrpc: '2.0', error: { code: 500, message: 'Internal error' } })
        } else {
          expect(a.status).toBe(200)
        }
      }
      // Still serving after all that.
      const after = await request(`${r.url}/mcp`, {
        method: 'POST',
        dispatcher: agent,
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo', { message: 'after' }, 'after')),
      })
      expect(after.statusCode).toBe(200)
      await after.body.text()
      expect(r.gateway.inFlight).toBe(0)
      await r.lifecycle.shutdown() // flushes the trail
      const entries = readJsonl(r.auditFile)
      expect(entries).toHaveLength(201)
      const byId = new Map(entries.map((e) => [e.request_id, e]))
      expect(byId.size).toBe(201) // one entry per request, none twice
      for (const a of answers) {
        const e = byId.get(a.id)
        expect(e).toBeDefined()
        if (a.tool === 'echo') {
          expect(e).toMatchObject({ decision: 'allow', status: 200, tool: 'echo' })
          expect(e?.reason_code).toBeUndefined()
        } else {
          expect(e).toMatchObject({ decision: 'error', reason_code: 'internal' })
          expect(e?.reason).toMatch(/^WL_INTERNAL: .*exploded/)
        }
        // Every stage that ran was finished, the throwing finish's neighbour included.
        if (a.tool !== 'boom-stage' && a.tool !== 'boom-async-stage') expect(r.released.has(a.id)).toBe(true)
      }
      // The entry that could not be built at all: the fields that cannot fail, and the status sent.
      const fallback = answers.find((a) => a.tool === 'boom-entry')!
      expect(byId.get(fallback.id)).toMatchObject({ identity: '', method: 'POST', tool: '', status: 200, reason_code: 'internal' })
      expect(unhandled).toEqual([])
    } finally {
      await agent.close()
    }
  })
})

describe('the shipped gateway (harness)', () => {
  test('a metric that throws for one call: that call is audited once as internal, the others as usual', async () => {
    const h = await startHarness({ mode: 'stateless-json' })
    try {
      const metrics = h.gateway.metrics.audit.unlabelled
      const record = metrics.recordRequest.bind(metrics)
      let calls = 0
      metrics.recordRequest = (decision, seconds) => {
        if (++calls === 2) throw new Error('metric exploded')
        record(decision, seconds)
      }
      const statuses: number[] = []
      for (let i = 0; i < 3; i++) {
        const res = await fetch(`${h.url}/mcp`, {
          method: 'POST',
          headers: { ...as('alice'), ...MCP_HEADERS },
          body: JSON.stringify(toolCall('echo', { message: 'hi' }, i)),
        })
        statuses.push(res.status)
        await res.text()
      }
      expect(statuses).toEqual([200, 200, 200])
      const entries = await h.audit()
      expect(entries.map((e) => e.reason_code ?? null)).toEqual([null, 'internal', null])
      expect(entries[1]).toMatchObject({ decision: 'error', status: 200, reason: 'WL_INTERNAL: metric exploded' })
    } finally {
      await h.close()
    }
  })
})
