/**
 * examples/client.ts as an operator runs it: compiled the way the build compiles it, started as a child
 * process against a real gateway (JWT auth, budgets, policy) in front of the bundled example MCP server,
 * judged by its output, its exit code and the audit trail the gateway wrote.
 */
import { execFile } from 'node:child_process'
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { transformFileSync } from '@swc/core'
import ts from 'typescript'
import { mintToken } from '../../src/cli/token'
import { type Harness, startHarness, tempDir } from '../helpers/harness'

const ROOT = join(__dirname, '..', '..')
const SECRET = 'client-example-test-secret-0123456789abcdef'

/**
 * examples/client.ts compiled alone with swc (as test/helpers/cli.ts compiles src/): it imports only
 * the SDK, so one file and a node_modules link make a runnable copy of what `npm run build` emits.
 */
function buildExample(): string {
  const out = tempDir('wardline-client-example-')
  const target = join(out, 'dist', 'examples', 'client.js')
  mkdirSync(join(out, 'dist', 'examples'), { recursive: true })
  const { code } = transformFileSync(join(ROOT, 'examples', 'client.ts'), {
    jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
    module: { type: 'commonjs' },
    swcrc: false,
  })
  writeFileSync(target, code)
  symlinkSync(join(ROOT, 'node_modules'), join(out, 'node_modules'), 'dir')
  return target
}

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs the example in a child process (async: the gateway it talks to lives in this process). */
function runExample(args: readonly string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [example, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 30_000 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1
        resolve({ code, stdout, stderr })
      },
    )
  })
}

let example: string
let h: Harness
let results: Harness

const config = {
  auth: { mode: 'jwt', jwt: { secret: SECRET } },
  features: { budget_enforcement: true },
  budget: { requests_per_window: 2, window_seconds: 600 },
  policy: {
    default: 'allow',
    filter_lists: false, // so the example can try the denied tool and meet the 403 itself
    rules: [{ identity: '*', tenant: 'guest', tool: 'expensive_tool', effect: 'deny' }],
  },
}

beforeAll(async () => {
  example = buildExample()
  h = await startHarness({ config })
  results = await startHarness({ config: { ...config, tool_refusals: 'result' } })
})

afterAll(async () => {
  await h?.close()
  await results?.close()
})

const token = (sub: string, tenant = 'acme', on: Harness = h) => mintToken(on.config, { sub, tenant, ttlSeconds: 600 })
const mcpUrl = (on: Harness = h) => `${on.url}/mcp`

test('lists the tools and calls one through the gateway with a bearer token, then ends its session', async () => {
  const jwt = await token('alice')
  const run = await runExample(['--url', mcpUrl(), '--tool', 'echo', '--args', '{"text":"hi there"}'], { WARDLINE_TOKEN: jwt })
  expect(run.stderr).toBe('')
  expect(run.code).toBe(0)
  expect(run.stdout).toMatch(/^connected to http:\/\/127\.0\.0\.1:\d+\/mcp \(server wardline-example [^,]+, session [0-9a-f-]{36}\)$/m)
  expect(run.stdout).toMatch(/^tools \(\d+\): .*\becho\b.*\bexpensive_tool\b/m)
  expect(run.stdout).toMatch(/^call 1\/1: echo \{"text":"hi there"\} -> hi there {2}\[RateLimit: "identity";r=1;t=\d+\]$/m)
  expect(run.stdout + run.stderr).not.toContain(jwt)

  const mine = (await h.audit()).filter((e) => e.identity === 'alice')
  expect(mine.filter((e) => e.method === 'tools/call').map((e) => [e.tool, e.decision])).toEqual([['echo', 'allow']])
  expect(mine.some((e) => e.method === 'tools/list' && e.decision === 'passthrough')).toBe(true)
  // The session was ended with a DELETE, not left for the server to time out.
  expect(mine.some((e) => e.method === 'DELETE')).toBe(true)
})

test('against a stateless server (what npm start runs) it works without a session and closes cleanly', async () => {
  const stateless = await startHarness({ config, mode: 'stateless-json' })
  try {
    const run = await runExample(['--url', mcpUrl(stateless), '--tool', 'add', '--args', '{"a":2,"b":3}'], {
      WARDLINE_TOKEN: await token('sam', 'acme', stateless),
    })
    expect(run.stderr).toBe('')
    expect(run.code).toBe(0)
    expect(run.stdout).toMatch(/, session none: stateless\)$/m)
    expect(run.stdout).toMatch(/^call 1\/1: add \{"a":2,"b":3\} -> 5 {2}\[RateLimit: /m)
  } finally {
    await stateless.close()
  }
})

test('a throttled call is reported with its bucket and retry time, and nothing after it is sent', async () => {
  const run = await runExample(['--url', mcpUrl(), '--calls', '5'], { WARDLINE_TOKEN: await token('bob') })
  expect(run.code).toBe(3)
  expect(run.stdout.match(/^call \d\/5: echo .* -> hello from examples\/client\.ts/gm)).toHaveLength(2)
  const refusal =
    /^call 3\/5: echo \{"text":"hello from examples\/client\.ts"\} refused: 429 Rate limit exceeded \(bucket identity\); retry in (\d+) s$/m.exec(
      run.stderr,
    )
  expect(refusal).not.toBeNull()
  expect(Number(refusal?.[1])).toBeGreaterThanOrEqual(1)
  const calls = (await h.audit()).filter((e) => e.identity === 'bob' && e.method === 'tools/call')
  expect(calls.map((e) => e.decision)).toEqual(['allow', 'allow', 'throttled'])
})

test('a call denied by policy is a 403 that names the policy, exit 3', async () => {
  const run = await runExample(['--url', mcpUrl(), '--tool', 'expensive_tool', '--args', '{}'], {
    WARDLINE_TOKEN: await token('gus', 'guest'),
  })
  expect(run.code).toBe(3)
  expect(run.stderr).toMatch(/^call 1\/1: expensive_tool \{\} refused: 403 Forbidden by policy \(denied by Wardline policy\)$/m)
  const calls = (await h.audit()).filter((e) => e.identity === 'gus' && e.method === 'tools/call')
  expect(calls.map((e) => [e.decision, e.reason])).toEqual([['deny', 'rule 0']])
})

test('with tool_refusals: result a refusal arrives as an isError result: reported as refused with its text, exit 3', async () => {
  const run = await runExample(['--url', mcpUrl(results), '--calls', '3'], { WARDLINE_TOKEN: await token('rita', 'acme', results) })
  expect(run.code).toBe(3)
  expect(run.stdout.match(/ -> hello from examples\/client\.ts/g)).toHaveLength(2)
  expect(run.stderr).toMatch(/^call 3\/3: echo .* returned an error result: Rate limit: .*is used up\. Try again in .+\.$/m)
})

test('a bad or expired token: exit 2 with the gateway reason, and the token is never echoed', async () => {
  const other = await startHarness({ config: { ...config, auth: { mode: 'jwt', jwt: { secret: 'x'.repeat(40) } } } })
  let forged: string
  try {
    forged = await token('mallory', 'acme', other)
  } finally {
    await other.close()
  }
  const bad = await runExample(['--url', mcpUrl()], { WARDLINE_TOKEN: forged })
  expect(bad.code).toBe(2)
  expect(bad.stderr.trim()).toBe('401 Unauthorized: bad token signature: mint a fresh token (wardline token) or check auth.jwt')
  expect(bad.stdout + bad.stderr).not.toContain(forged)

  const expired = await mintToken(h.config, { sub: 'alice', tenant: 'acme', ttlSeconds: 60 }, () => Date.now() - 3_600_000)
  const late = await runExample(['--url', mcpUrl()], { WARDLINE_TOKEN: expired })
  expect(late.code).toBe(2)
  expect(late.stderr).toMatch(/^401 Unauthorized: token expired: /m)
  const refused = (await h.audit()).filter((e) => e.decision === 'unauthorized')
  expect(refused.map((e) => e.reason)).toEqual(expect.arrayContaining(['bad token signature', 'token expired']))
})

test('a revoked identity: exit 2 saying it was revoked and to ask an operator, not to mint a fresh token', async () => {
  await h.gateway.revocations.revoke({ identity: 'dave', tenant: 'acme', until: null, reason: 'laptop stolen' })
  // A fresh token changes nothing for a revoked identity (the second run mints another), so the hint must not suggest one.
  const run = await runExample(['--url', mcpUrl()], { WARDLINE_TOKEN: await token('dave') })
  expect(run.code).toBe(2)
  expect(run.stderr.trim()).toBe(
    '401 Unauthorized: revoked: this token (or its identity) was revoked; ask an operator (wardline revoke --list)',
  )
  const again = await runExample(['--url', mcpUrl()], { WARDLINE_TOKEN: await token('dave') })
  expect(again.stderr).toBe(run.stderr)
})

test('a token exported with its "Bearer " prefix still works (the header is not doubled)', async () => {
  const run = await runExample(['--url', mcpUrl(), '--calls', '1'], { WARDLINE_TOKEN: `Bearer ${await token('carol')}\n` })
  expect(run.stderr).toBe('')
  expect(run.code).toBe(0)
})

test('bad usage is exit 1 naming what is wrong, and sends nothing', async () => {
  const jwt = await token('dave')
  const before = (await h.audit()).length
  const cases: Array<[string[], Record<string, string>, RegExp]> = [
    [['--url', mcpUrl()], {}, /^no token: set WARDLINE_TOKEN/],
    [['--url', mcpUrl(), '--args', '[1]'], { WARDLINE_TOKEN: jwt }, /^--args: must be a JSON object/],
    [['--url', mcpUrl(), '--args', '{'], { WARDLINE_TOKEN: jwt }, /^--args: not JSON \(/],
    [['--url', mcpUrl(), '--calls', '0'], { WARDLINE_TOKEN: jwt }, /^--calls 0: must be a whole number from 1 to 1000/],
    [['--url', 'ftp://127.0.0.1/mcp'], { WARDLINE_TOKEN: jwt }, /^--url ftp:\/\/127\.0\.0\.1\/mcp: must be http:\/\/ or https:\/\//],
    [['--verbose'], { WARDLINE_TOKEN: jwt }, /^unknown option --verbose\nusage: /],
    [['--tool'], { WARDLINE_TOKEN: jwt }, /^--tool needs a value/],
    [['--url', mcpUrl()], { WARDLINE_TOKEN: 'two words' }, /^the token contains whitespace/],
  ]
  for (const [args, env, message] of cases) {
    const run = await runExample(args, env)
    expect({ args, code: run.code, stderr: run.stderr }).toEqual({ args, code: 1, stderr: expect.stringMatching(message) as unknown })
  }
  expect((await h.audit()).length).toBe(before)
})

test('a tool the caller is not offered is exit 1 before any call is sent', async () => {
  const run = await runExample(['--url', mcpUrl(), '--tool', 'no_such_tool'], { WARDLINE_TOKEN: await token('erin') })
  expect(run.code).toBe(1)
  expect(run.stderr).toMatch(/^tool no_such_tool is not in this caller's tool list/m)
  expect((await h.audit()).filter((e) => e.identity === 'erin' && e.method === 'tools/call')).toEqual([])
})

test('an unreachable gateway is exit 4 with the network reason; a wrong path says which endpoint to use', async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port: p } = probe.address() as { port: number }
      probe.close(() => resolve(p))
    })
  })
  const down = await runExample(['--url', `http://127.0.0.1:${port}/mcp`], { WARDLINE_TOKEN: await token('frank') })
  expect(down.code).toBe(4)
  expect(down.stderr.trim()).toBe(`cannot reach http://127.0.0.1:${port}: ECONNREFUSED`)

  const wrongPath = await runExample(['--url', `${h.url}/sse`], { WARDLINE_TOKEN: await token('frank') })
  expect(wrongPath.code).toBe(4)
  expect(wrongPath.stderr).toMatch(/is this the Streamable HTTP endpoint \(usually …\/mcp\)\?/)
})

test('a 404 forwarded from a gateway whose upstream URL ends with /mcp names the upstream URL as the likely cause', async () => {
  // The mistake most servers' READMEs invite: upstream written with the server's own /mcp, so /mcp goes to /mcp/mcp.
  const doubled = await startHarness({ config, upstreamUrl: `${h.upstream.url}/mcp` })
  try {
    const run = await runExample(['--url', mcpUrl(doubled)], { WARDLINE_TOKEN: await token('gina', 'acme', doubled) })
    expect(run.code).toBe(4)
    expect(run.stderr.trim()).toBe(
      `HTTP 404 from ${mcpUrl(doubled)}: the MCP server behind Wardline has no /mcp. Likely cause: the gateway's upstream URL ends with the server's path (upstream: http://host:3001/mcp sends /mcp to /mcp/mcp); set upstream to the server's address without it (wardline check-config warns about this)`,
    )
  } finally {
    await doubled.close()
  }
})

test('npm run build emits it: tsconfig.build.json compiles examples/client.ts into dist/examples/client.js', () => {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.build.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'))
      },
    },
  )
  expect(parsed?.fileNames).toContain(join(ROOT, 'examples', 'client.ts'))
  expect(parsed?.options.outDir).toBe(join(ROOT, 'dist'))
  expect(parsed?.options.rootDir).toBe(ROOT)
  // CommonJS output, so the example's `require.main === module` guard runs it when started with node.
  expect(parsed?.options.module).toBe(ts.ModuleKind.Node20)
})
