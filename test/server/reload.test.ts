import { renameSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import yaml from 'js-yaml'
import { reload } from '../../src/cli/serve'
import { loadConfig } from '../../src/config/load'
import { configOrigin, setConfigOrigin } from '../../src/config/origin'
import { enforcementLost } from '../../src/config/reload-guard'
import { silentLogger } from '../../src/log'
import { capturingLogger } from '../budget/budget-harness'
import { MCP_HEADERS, as, configFrom, readJsonl, startHarness, tempDir, toolCall, type Harness } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

async function call(h: Harness, tool: string, identity = 'alice'): Promise<number> {
  const res = await fetch(`${h.url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...as(identity) },
    body: JSON.stringify(toolCall(tool, { text: 'hi' })),
  })
  await res.arrayBuffer()
  return res.status
}

/** The harness's config with some keys changed, read the way the file would be (same base directory). */
function changed(h: Harness, tree: Record<string, unknown>) {
  return configFrom(tree, {}, dirname(h.auditFile))
}

const BASE = {
  features: { budget_enforcement: true },
  budget: { requests_per_window: 2, window_seconds: 3600 },
}

describe('reloading budget and policy without a restart', () => {
  let h: Harness
  beforeEach(async () => {
    h = await startHarness({ mode: 'stateless-json', config: BASE })
  })
  afterEach(async () => {
    await h.close()
  })

  test('a raised limit applies at once and the calls already used still count', async () => {
    expect([await call(h, 'echo'), await call(h, 'echo'), await call(h, 'echo')]).toEqual([200, 200, 429])
    h.gateway.reload(changed(h, { ...h.tree, ...BASE, budget: { requests_per_window: 3, window_seconds: 3600 } }))
    expect([await call(h, 'echo'), await call(h, 'echo')]).toEqual([200, 429])
  })

  test('a policy added by a reload denies the next call, and the audit names its rule', async () => {
    expect(await call(h, 'echo')).toBe(200)
    h.gateway.reload(
      changed(h, { ...h.tree, ...BASE, policy: { default: 'allow', rules: [{ identity: 'alice', tool: 'echo', effect: 'deny' }] } }),
    )
    expect(await call(h, 'echo')).toBe(403)
    const last = (await h.audit()).at(-1)
    expect(last).toMatchObject({ identity: 'alice', tool: 'echo', decision: 'deny', reason: 'rule 0' })
  })

  test('settings that need a restart are reported and left as they were', async () => {
    const restart = h.gateway.reload(changed(h, { ...h.tree, ...BASE, upstream: 'http://127.0.0.1:9', max_body_bytes: 10 }))
    expect(restart.sort()).toEqual(['max_body_bytes', 'upstream'])
    expect(await call(h, 'echo')).toBe(200) // still the old upstream, still the old body limit
  })
})

describe('SIGHUP reload from the file', () => {
  test('a file that fails validation changes nothing and the gateway keeps serving', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: BASE })
    try {
      const dir = tempDir()
      const file = join(dir, 'wardline.yaml')
      const tree = { ...h.tree, ...BASE, policy: { default: 'deny' } }
      writeFileSync(file, yaml.dump({ ...tree, policy: { default: 'sometimes' } }))
      expect(reload(file, h.gateway, silentLogger())).toBe(false)
      expect(await call(h, 'echo')).toBe(200)

      writeFileSync(file, yaml.dump(tree))
      expect(loadConfig(file).policy?.default).toBe('deny')
      expect(reload(file, h.gateway, silentLogger())).toBe(true)
      expect(await call(h, 'echo')).toBe(403)
    } finally {
      await h.close()
    }
  })
})

test('SIGHUP reopens the audit file, so rotation by rename works, whether the config file is valid or not', async () => {
  const h = await startHarness({ mode: 'stateless-json' })
  const dir = tempDir()
  const file = join(dir, 'wardline.yaml')
  try {
    expect(await call(h, 'echo')).toBe(200)
    await h.gateway.audit.flush()
    for (const [rotated, valid] of [
      [`${h.auditFile}.1`, true],
      [`${h.auditFile}.2`, false],
    ] as const) {
      renameSync(h.auditFile, rotated) // what logrotate does before its postrotate kill -HUP
      writeFileSync(file, yaml.dump(valid ? h.tree : { ...h.tree, log_level: 'loud' }))
      expect(reload(file, h.gateway, silentLogger())).toBe(valid)
      expect(await call(h, 'echo', valid ? 'after-1' : 'after-2')).toBe(200)
      await h.gateway.audit.flush()
      expect(readJsonl(h.auditFile).map((e) => e.identity)).toEqual([valid ? 'after-1' : 'after-2'])
    }
    expect(readJsonl(`${h.auditFile}.1`).map((e) => e.identity)).toEqual(['alice'])
  } finally {
    await h.close()
  }
})

describe('shutdown_delay_seconds', () => {
  test('readiness turns 503 while calls are still served, then the listener closes', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: { shutdown_delay_seconds: 0.5 } })
    const stopped = h.gateway.shutdown()
    try {
      const ready = await fetch(`${h.url}/readyz`)
      expect(ready.status).toBe(503)
      expect(await call(h, 'echo')).toBe(200)
    } finally {
      await stopped
      await h.upstream.close()
    }
    await expect(fetch(`${h.url}/healthz`)).rejects.toThrow()
  })
})

/** Budget enforced, with room for every call these tests make (a denied call charges its identity bucket). */
const ROOMY = { features: { budget_enforcement: true }, budget: { requests_per_window: 100, window_seconds: 3600 } }

/** A file that sets every guarded key but the Postgres flag: a header-mode gateway with a policy, a budget and allowed hosts. */
const GUARDED_BASE = {
  listen: '127.0.0.1:0',
  upstream: 'http://127.0.0.1:1',
  auth: { mode: 'header' },
  audit: { output: 'stdout' },
  allowed_hosts: ['localhost:8080'],
  features: { budget_enforcement: true },
  budget: { requests_per_window: 5, window_seconds: 60 },
  policy: { default: 'deny' },
}

describe('a reload never drops an enforcement block it was not told to drop', () => {
  /** The file as an operator writes it, enforcement blocks last; `cut` ends it just before `policy:`. */
  function files(h: Harness) {
    const tree = { ...h.tree, ...ROOMY, policy: { default: 'allow', rules: [{ identity: '*', tool: 'echo', effect: 'deny' }] } }
    const text = yaml.dump(tree)
    return { tree, text, cut: text.slice(0, text.indexOf('policy:')) }
  }

  test('a file cut before policy: (valid YAML) is refused: the denied tool stays denied, and the log says why', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: ROOMY })
    try {
      const file = join(tempDir(), 'wardline.yaml')
      const { text, cut } = files(h)
      writeFileSync(file, text)
      expect(reload(file, h.gateway, silentLogger())).toBe(true)
      expect(await call(h, 'echo')).toBe(403)

      writeFileSync(file, cut) // what a reader sees while `cat new > wardline.yaml` is still writing
      expect(loadConfig(file).policy).toBeNull() // the cut file alone is a valid config without a policy
      const { log, lines } = capturingLogger()
      expect(reload(file, h.gateway, log)).toBe(false)
      expect(await call(h, 'echo')).toBe(403)
      await waitFor(() => lines.length > 0, { what: 'the refusal to be logged' })
      expect(lines).toEqual([
        {
          level: 'error',
          message: 'configuration reload rejected: the running configuration is unchanged',
          config: file,
          problems: [
            expect.stringMatching(
              /^policy: set in the running configuration, missing or blank in the file .*write policy: \{default: allow, rules: \[\]\}/,
            ),
          ],
        },
      ])

      writeFileSync(file, `${cut}policy:\n`) // cut one line later: the key with nothing after it
      expect(reload(file, h.gateway, silentLogger())).toBe(false)
      expect(await call(h, 'echo')).toBe(403)

      writeFileSync(file, text) // the whole file again: applied (the guard compares with the last file applied)
      expect(reload(file, h.gateway, silentLogger())).toBe(true)
      expect(await call(h, 'echo')).toBe(403)
    } finally {
      await h.close()
    }
  })

  test('removing a block on purpose is written out, and then applies', async () => {
    const h = await startHarness({ mode: 'stateless-json', config: ROOMY })
    try {
      const file = join(tempDir(), 'wardline.yaml')
      const { tree } = files(h)
      writeFileSync(file, yaml.dump(tree))
      expect(reload(file, h.gateway, silentLogger())).toBe(true)
      expect(await call(h, 'echo')).toBe(403)
      writeFileSync(file, yaml.dump({ ...tree, policy: { default: 'allow', rules: [] } }))
      expect(reload(file, h.gateway, silentLogger())).toBe(true)
      expect(await call(h, 'echo')).toBe(200)
    } finally {
      await h.close()
    }
  })

  test('budget, auth, allowed_hosts and feature flags are guarded the same way; a policy moving to a policy_file is not a loss', () => {
    const dir = tempDir()
    writeFileSync(join(dir, 'policy.yaml'), yaml.dump({ default: 'deny' }))
    const base = GUARDED_BASE
    const from = (tree: Record<string, unknown>) => configFrom(tree, {}, dir)
    // The keys lost, as a set: each problem names its key and stands alone, whatever the order.
    const lost = (next: Record<string, unknown>) =>
      enforcementLost(from(base), from(next))
        .map((p) => p.split(':')[0])
        .sort()
    const without = (...keys: string[]) => Object.fromEntries(Object.entries(base).filter(([k]) => !keys.includes(k)))
    expect(lost(base)).toEqual([])
    expect(lost(without('budget', 'policy'))).toEqual(['budget', 'policy'])
    expect(lost({ ...base, budget: null })).toEqual(['budget'])
    expect(lost(without('features', 'budget', 'policy'))).toEqual(['budget', 'features.budget_enforcement', 'policy'])
    expect(lost({ ...base, features: {} })).toEqual(['features.budget_enforcement'])
    expect(lost(without('allowed_hosts'))).toEqual(['allowed_hosts'])
    expect(lost({ ...without('policy'), policy_file: 'policy.yaml' })).toEqual([])
    // Written out, each is the operator's own.
    expect(lost({ ...base, features: { budget_enforcement: false }, budget: {}, allowed_hosts: [], policy: { default: 'allow' } })).toEqual(
      [],
    )
    expect(enforcementLost(from(without('budget', 'policy')), from(without('budget', 'policy', 'allowed_hosts')))).toHaveLength(1)
    // A key the running file never set, or set to what its absence means, is not guarded.
    expect(enforcementLost(from({ ...base, allowed_hosts: [] }), from(without('allowed_hosts')))).toEqual([])
  })

  test('each lost key says how to remove it on purpose: the keys and the writing the schema marks', () => {
    const dir = tempDir()
    const base = {
      ...GUARDED_BASE,
      features: { budget_enforcement: true, postgres_storage: true },
      postgres: { dsn: 'postgres://wardline@127.0.0.1:5432/wardline' },
    }
    // A valid file cannot leave auth out (jwt mode needs a key source): it is blanked in the YAML tree itself.
    const next = configFrom({ listen: base.listen, upstream: base.upstream, audit: base.audit, auth: { mode: 'header' } }, {}, dir)
    const tree = { ...(configOrigin(next)!.tree as Record<string, unknown>), auth: null }
    setConfigOrigin(next, { ...configOrigin(next)!, tree })
    const problems = enforcementLost(configFrom(base, {}, dir), next)
    const removeWith = (key: string): string | undefined =>
      problems
        .find((p) => p.startsWith(`${key}: set in the running configuration, missing or blank in the file`))
        ?.match(/To remove it on purpose, write (.*); or restart to apply the file as it is$/)?.[1]
    expect(
      Object.fromEntries(
        ['policy', 'budget', 'auth', 'features.budget_enforcement', 'features.postgres_storage', 'allowed_hosts'].map((k) => [
          k,
          removeWith(k),
        ]),
      ),
    ).toEqual({
      policy: 'policy: {default: allow, rules: []}',
      budget: 'budget: {}',
      auth: 'an auth block (a gateway always authenticates)',
      'features.budget_enforcement': 'features: {budget_enforcement: false}',
      'features.postgres_storage': 'features: {postgres_storage: false}',
      allowed_hosts: 'allowed_hosts: []',
    })
    expect(problems).toHaveLength(6)
  })
})
