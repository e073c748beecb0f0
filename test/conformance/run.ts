/**
 * Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against a server URL as
 * a child process and reads back its checks. On Node 20 it needs node20-fs-glob.mjs (beside this file).
 */
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs'
import { createServer, request, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const ROOT = join(__dirname, '..', '..')
const CLI = join(ROOT, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js')
const SHIM = join(__dirname, 'node20-fs-glob.mjs')

export interface ConformanceCheck {
  readonly scenario: string
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/**
 * `conformance server --url <url>` for one scenario (or all of them), every check it recorded, in
 * order; INFO checks (the suite's own trace) left out. Rejects when the suite could not run at all.
 */
export async function runConformance(url: string, scenario?: string, timeoutMs = 120_000): Promise<ConformanceCheck[]> {
  const out = mkdtempSync(join(process.env.WARDLINE_TEST_TMP ?? tmpdir(), 'wardline-conformance-'))
  const args = ['--import', SHIM, CLI, 'server', '--url', url, '-o', out, ...(scenario === undefined ? [] : ['--scenario', scenario])]
  const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } })
  let output = ''
  child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')))
  child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')))
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  await new Promise<void>((resolve) => child.on('close', () => resolve()))
  clearTimeout(timer)
  const checks: ConformanceCheck[] = []
  for (const dir of readdirSync(out).sort()) {
    const name = /^server-(.+)-\d{4}-\d\d-\d\dT/.exec(dir)?.[1] ?? dir
    const recorded = JSON.parse(readFileSync(join(out, dir, 'checks.json'), 'utf8')) as Array<Omit<ConformanceCheck, 'scenario'>>
    for (const c of recorded) {
      if (c.status !== 'INFO')
        checks.push({ scenario: name, id: c.id, status: c.status, ...(c.errorMessage ? { errorMessage: c.errorMessage } : {}) })
    }
  }
  if (checks.length === 0) throw new Error(`the conformance suite recorded no check:\n${output.slice(-2000)}`)
  return checks
}

/** Per scenario: passed when none of its checks is a FAILURE (the suite's own count: "32/32"). */
export function scenarioResults(checks: readonly ConformanceCheck[]): Map<string, boolean> {
  const out = new Map<string, boolean>()
  for (const c of checks) out.set(c.scenario, (out.get(c.scenario) ?? true) && c.status !== 'FAILURE')
  return out
}

/**
 * A front that adds `X-Wardline-Identity` (header auth) to every request and forwards it to the gateway
 * byte for byte otherwise, Host and Origin included: the suite sends no credentials, and a real client
 * would carry them. Answers (SSE too) are piped back as they arrive.
 */
export async function identityFront(
  gatewayUrl: string,
  identity: string,
): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const target = new URL(gatewayUrl)
  const server = createServer((req, res) => {
    const upstream = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, 'x-wardline-identity': identity },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
      },
    )
    upstream.on('error', () => res.destroy())
    res.on('close', () => upstream.destroy())
    req.pipe(upstream)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}
