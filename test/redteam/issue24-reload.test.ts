/**
 * Red team (reload of a half-written file): cuts *inside* a block. The file as
 * yaml.dump (and the docs' examples) write it puts `default:` before `rules:`, so a reader that sees
 * the file while `cat new > wardline.yaml` is still writing gets a policy whose rules are gone and
 * whose default allows everything; a cut inside the last line of the budget turns a window of 60 s
 * into one of 6 s. Both are valid YAML and valid configurations: the reload guard refuses a policy
 * that lost its rules without `rules: []`, and a file (or policy file) that does not end with a line break.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { MemoryBudgetStore } from '../../src/budget/memory-store'
import { reload } from '../../src/cli/serve'
import { loadConfig } from '../../src/config/load'
import { silentLogger } from '../../src/log'
import { MCP_HEADERS, as, startHarness, tempDir, toolCall, type Harness } from '../helpers/harness'

async function call(h: Harness, tool: string): Promise<number> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as('alice') },
    body: JSON.stringify(toolCall(tool, { text: 'hi' })),
  })
  await res.arrayBuffer()
  return res.status
}

const BUDGET = { features: { budget_enforcement: true }, budget: { requests_per_window: 3, window_seconds: 60 } }
const POLICY = { default: 'allow', rules: [{ identity: '*', tool: 'echo', effect: 'deny' }] }

let h: Harness | undefined
afterEach(async () => {
  await h?.close()
  h = undefined
})

test('a file cut inside the policy block (after rules:) is not applied: the denied tool stays denied', async () => {
  h = await startHarness({ mode: 'stateless-json', config: { policy: POLICY } })
  const file = join(tempDir(), 'wardline.yaml')
  const text = yaml.dump({ ...h.tree, policy: POLICY })
  writeFileSync(file, text)
  expect(reload(file, h.gateway, silentLogger())).toBe(true)
  expect(await call(h, 'echo')).toBe(403)
  // What a reader sees while the file is still being written: everything up to the end of `rules:`.
  const cut = text.slice(0, text.indexOf('rules:') + 'rules:'.length) + '\n'
  expect(loadConfig(file).policy).not.toBeNull()
  writeFileSync(file, cut)
  expect(loadConfig(file).policy?.rules).toEqual([]) // valid: default allow, no rules
  reload(file, h.gateway, silentLogger())
  expect(await call(h, 'echo')).toBe(403)
})

test('a file cut inside the last number of the budget is not applied: the window stays 60 s', async () => {
  // The budget's clock is the test's, so "7 s later" is a step of it, not a 7 s wait.
  let now = 1_000_000
  h = await startHarness({ mode: 'stateless-json', config: BUDGET, gateway: { budgetStore: new MemoryBudgetStore({ now: () => now }) } })
  const file = join(tempDir(), 'wardline.yaml')
  const tree: Record<string, unknown> = { ...h.tree, ...BUDGET }
  delete tree.policy
  const text = yaml.dump(tree)
  // yaml.dump keeps insertion order: budget is the last block here, window_seconds its last key.
  expect(text.trimEnd().endsWith('window_seconds: 60')).toBe(true)
  writeFileSync(file, text)
  expect(reload(file, h.gateway, silentLogger())).toBe(true)
  writeFileSync(file, text.trimEnd().slice(0, -1)) // `window_seconds: 6`, a valid file
  expect(loadConfig(file).budget?.limits).toEqual([{ requestsPerWindow: 3, windowSeconds: 6 }])
  reload(file, h.gateway, silentLogger())
  // The running budget must still be 3 per 60 s: after 3 calls and 7 s, the 4th is still refused.
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push(await call(h, 'echo'))
  now += 7_000
  statuses.push(await call(h, 'echo'))
  expect(statuses).toEqual([200, 200, 200, 429])
})

test('a policy_file cut before rules: is not applied: the guard does not look into the policy file', async () => {
  const dir = tempDir()
  const policyFile = join(dir, 'policy.yaml')
  const policyText = yaml.dump(POLICY)
  writeFileSync(policyFile, policyText)
  h = await startHarness({ mode: 'stateless-json', config: { policy_file: policyFile } })
  const file = join(dir, 'wardline.yaml')
  writeFileSync(file, yaml.dump(h.tree))
  expect(reload(file, h.gateway, silentLogger())).toBe(true)
  expect(await call(h, 'echo')).toBe(403)
  // The policy file while `cat new > policy.yaml` is still writing: its first line only.
  writeFileSync(policyFile, policyText.slice(0, policyText.indexOf('rules:')))
  expect(loadConfig(file).policy?.rules).toEqual([])
  reload(file, h.gateway, silentLogger())
  expect(await call(h, 'echo')).toBe(403)
})

test('a policy_file cut inside a line (no final line break) is not applied; the whole file then is', async () => {
  const dir = tempDir()
  const policyFile = join(dir, 'policy.yaml')
  // `tool` last in its rule, so a cut inside its name still reads as a valid policy.
  const both = { default: 'allow', rules: [...POLICY.rules, { identity: '*', effect: 'deny', tool: 'add_all' }] }
  writeFileSync(policyFile, yaml.dump(POLICY))
  h = await startHarness({ mode: 'stateless-json', config: { policy_file: policyFile } })
  const file = join(dir, 'wardline.yaml')
  writeFileSync(file, yaml.dump(h.tree))
  expect(reload(file, h.gateway, silentLogger())).toBe(true)
  // The new policy while it is still being written: its last rule's tool cut to `add_a`, valid YAML.
  const whole = yaml.dump(both)
  writeFileSync(policyFile, whole.trimEnd().slice(0, -2))
  expect(loadConfig(file).policy?.rules[1].target).toBe('add_a')
  expect(reload(file, h.gateway, silentLogger())).toBe(false)
  expect(await call(h, 'echo')).toBe(403)
  writeFileSync(policyFile, whole)
  expect(reload(file, h.gateway, silentLogger())).toBe(true)
  expect(await call(h, 'echo')).toBe(403)
})
