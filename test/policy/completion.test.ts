/**
 * completion/complete and tasks/* before the policy stage: what each call is judged as, from the bytes
 * the parser read to the denial the stage records. The gateway-level view is test/e2e/completion-gate.test.ts.
 */
import { auditEntries, entryCount } from '../../src/audit/entry'
import { parseMessages } from '../../src/jsonrpc/parse'
import { Exchange } from '../../src/pipeline/exchange'
import { compilePolicy } from '../../src/policy/compile'
import { policyStage } from '../../src/policy/stage'
import { configFrom } from '../helpers/harness'

const POLICY = {
  default: 'deny',
  rules: [
    { identity: 'intern-*', method: 'prompts/get', tool: 'greeting', effect: 'deny' }, // rule 0
    { identity: '*', method: 'prompts/get', tool: 'greeting', effect: 'allow' }, // rule 1
    { identity: '*', method: 'resources/read', tool: 'example://notes/*', effect: 'allow' }, // rule 2
    { identity: '*', method: 'tools/call', tool: '*', effect: 'allow' }, // rule 3
    { identity: 'ops', method: '*', tool: '*secret*', effect: 'allow' }, // rule 4
    { identity: 'ops', method: 'prompts/*', tool: 'audit', effect: 'allow' }, // rule 5
  ],
}

/** A policy read the way an operator's wardline.yaml is read. */
function compiled(policy: Record<string, unknown>) {
  const config = configFrom({ listen: '127.0.0.1:0', upstream: 'http://127.0.0.1:1', auth: { mode: 'header' }, policy })
  return compilePolicy(config.policy!)
}

const stage = policyStage(compiled(POLICY))

/** The exchange after the policy stage ran on `body` sent by `identity`. */
async function judged(body: unknown, identity: string): Promise<Exchange> {
  const parsed = parseMessages(Buffer.from(JSON.stringify(body)), { maxJsonDepth: 64, maxBatchMessages: 100 })
  if (!parsed.ok) throw new Error(parsed.reason)
  const ex = new Exchange({ headers: {}, url: '/mcp' } as never, {} as never, 'r', 0, 0)
  ex.principal = { identity, tenant: 'acme' }
  ex.calls = parsed.calls
  ex.batch = parsed.batch
  await stage.run(ex)
  return ex
}

const completion = (ref: Record<string, unknown>, id = 1) => ({
  jsonrpc: '2.0',
  id,
  method: 'completion/complete',
  params: { ref, argument: { name: 'name', value: 'A' } },
})
const prompt = (name: string) => completion({ type: 'ref/prompt', name })
const resource = (uri: string) => completion({ type: 'ref/resource', uri })

/** The denial reason, or 'allowed'. */
async function verdict(body: unknown, identity: string): Promise<string> {
  return (await judged(body, identity)).denial?.reason ?? 'allowed'
}

describe('a completion is judged as the call it completes', () => {
  test('a prompt completion gets exactly what prompts/get of that prompt gets, by the same rule', async () => {
    for (const identity of ['intern-sam', 'alice']) {
      const get = await verdict({ jsonrpc: '2.0', id: 1, method: 'prompts/get', params: { name: 'greeting' } }, identity)
      expect(await verdict(prompt('greeting'), identity)).toBe(get)
    }
    expect(await verdict(prompt('greeting'), 'intern-sam')).toBe('rule 0')
    expect(await verdict(prompt('greeting'), 'alice')).toBe('allowed')
    expect(await verdict(prompt('other'), 'alice')).toBe('default')
  })

  test('method families and "*" reach completions through the method they are judged as', async () => {
    expect(await verdict(prompt('audit'), 'ops')).toBe('allowed') // prompts/* rule
    expect(await verdict(prompt('secret_plan'), 'ops')).toBe('allowed') // "*" rule
    expect(await verdict(resource('example://secret/{id}'), 'ops')).toBe('allowed') // "*" rule
    expect(await verdict(prompt('audit'), 'alice')).toBe('default')
  })

  test('a tools/call rule never admits a completion, whatever its pattern', async () => {
    // rule 3 allows every tool; a prompt named like a tool is still judged by the prompt rules.
    expect(await verdict(prompt('echo'), 'alice')).toBe('default')
  })

  test('a resource template is judged by its text as resources/read: a pattern over its URIs covers it', async () => {
    expect(await verdict(resource('example://notes/{id}'), 'alice')).toBe('allowed')
    expect(await verdict({ jsonrpc: '2.0', id: 1, method: 'resources/read', params: { uri: 'example://notes/7' } }, 'alice')).toBe(
      'allowed',
    )
    expect(await verdict(resource('example://private/{id}'), 'alice')).toBe('default')
  })

  test('the audit keeps the completion as its method and the ref as its target; the element names its rule', async () => {
    const ex = await judged(
      [{ jsonrpc: '2.0', id: 1, method: 'ping' }, completion({ type: 'ref/prompt', name: 'greeting' }, 2)],
      'intern-sam',
    )
    expect(ex.denial?.reason).toBe('batch refused: element 1 denied by rule 0')
    expect(ex.calls[1]).toMatchObject({ method: 'completion/complete', target: 'greeting', policyMethod: 'prompts/get', reason: 'rule 0' })
  })

  test('a forwarded batch gives an allowed completion an audit entry of its own; a ping shares the rest', async () => {
    const ex = await judged([{ jsonrpc: '2.0', id: 1, method: 'ping' }, completion({ type: 'ref/prompt', name: 'greeting' }, 2)], 'alice')
    expect(ex.denial).toBeNull()
    ex.forwarded = true
    ex.status = 200
    expect(entryCount(ex)).toBe(2)
    expect(auditEntries(ex, 0).map((e) => [e.request_id, e.method, e.tool, e.decision])).toEqual([
      ['r/1', 'completion/complete', 'greeting', 'allow'],
      ['r/rest', 'ping', '', 'passthrough'],
    ])
  })
})

describe('tasks (MCP 2025-11-25)', () => {
  test('a task-augmented tools/call is judged like any tools/call', async () => {
    const call = (name: string) => ({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {}, task: { ttl: 1000 } } })
    expect(await verdict(call('report'), 'alice')).toBe('allowed')
    const denyAll = policyStage(compiled({ default: 'deny' }))
    const ex = await judged(call('report'), 'alice')
    ex.denial = null
    await denyAll.run(ex)
    expect(ex.denial).toMatchObject({ status: 403, reason: 'default' })
  })

  test('tasks/get, tasks/result, tasks/list and tasks/cancel are not judged, even under a default-deny policy', async () => {
    for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel', 'tasks/list']) {
      expect(await verdict({ jsonrpc: '2.0', id: 1, method, params: method === 'tasks/list' ? {} : { taskId: 'abc' } }, 'nobody')).toBe(
        'allowed',
      )
    }
  })
})
