import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { ROOT, runCli } from '../helpers/cli'
import { MCP_HEADERS, rpc, startHarness } from '../helpers/harness'

/**
 * Red team (obs): the token commands docs/clients.md prints, run as written (node dist/src/main.js is
 * the CLI runCli runs) from a checkout, and the token used against a gateway reading the same
 * wardline.yaml auth block.
 */
const page = readFileSync(join(ROOT, 'docs/clients.md'), 'utf8')

/** The argv of each `$(node dist/src/main.js token …)` on the page. */
function tokenCommands(): string[][] {
  return [...page.matchAll(/\$\(node dist\/src\/main\.js (token [^)]*)\)/g)].map((m) => m[1].split(/\s+/))
}

function claims(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString('utf8')) as Record<string, unknown>
}

test('the page has the token commands this file runs', () => {
  expect(tokenCommands().map((a) => a.join(' '))).toEqual([
    'token --config wardline.yaml --sub alice --tenant acme --ttl 8h',
    'token --sub alice --tenant acme',
  ])
})

test.each(tokenCommands().map((a) => [a.join(' '), a] as const))(
  '`%s` from the checkout mints a token the shipped config accepts',
  async (_name, argv) => {
    const r = runCli(argv)
    expect(r.stderr).not.toContain('Error')
    expect(r.code).toBe(0)
    const token = r.stdout.trim()
    expect(token.split('.')).toHaveLength(3)
    const c = claims(token)
    expect(c).toMatchObject({ sub: 'alice' })
    if (argv.includes('--ttl')) expect((c.exp as number) - (c.iat as number)).toBe(8 * 3600)

    // A gateway with wardline.yaml's own auth block (its secret, its require_tenant) takes it.
    const shipped = yaml.load(readFileSync(join(ROOT, 'wardline.yaml'), 'utf8')) as { auth: unknown }
    const h = await startHarness({ mode: 'stateless-json', config: { auth: shipped.auth } })
    try {
      const ok = await fetch(`${h.url}/mcp`, {
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: `Bearer ${token}` },
        body: JSON.stringify(rpc('tools/list')),
      })
      expect(ok.status).toBe(200)
      expect(await ok.text()).toContain('echo')
      const entries = await h.audit()
      expect(entries.at(-1)).toMatchObject({ identity: 'alice', tenant: 'acme' })
    } finally {
      await h.close()
    }
  },
)

test('--ttl takes what the page says (90s, 30m, 8h, 7d, up to 365 days) and refuses more with a precise message', () => {
  for (const ttl of ['90s', '30m', '8h', '7d', '365d'])
    expect(runCli(['token', '--sub', 'alice', '--tenant', 'acme', '--ttl', ttl]).code).toBe(0)
  const r = runCli(['token', '--sub', 'alice', '--tenant', 'acme', '--ttl', '366d'])
  expect(r.code).not.toBe(0)
  expect(r.stderr).toContain('--ttl 366d: must be like 90s, 30m, 1h or 7d, between 1s and 365d')
  expect(r.stdout).toBe('')
})
