/**
 * Red team (the example MCP server's start-up messages): every failure to listen says what
 * to change, and the change must fit the failure: an address this host does not have is fixed with
 * --host, not with another --port. The built example run as a child process.
 */
import { spawnSync } from 'node:child_process'
import { exampleScript } from '../helpers/cli'

function run(args: readonly string[]): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [exampleScript('mcp-server'), ...args], { encoding: 'utf8', timeout: 10_000 })
  return { code: r.status, stderr: r.stderr }
}

test('--host naming an address of no interface here (TEST-NET 192.0.2.1) is exit 1 with a line that points at --host', () => {
  const r = run(['--host', '192.0.2.1', '--port', '0'])
  expect(r.code).toBe(1)
  expect(r.stderr.trim()).toBe(
    'example MCP server failed to start: --host/--port 192.0.2.1:0 is not an address of this host: pass another --port or --host (or stop what listens there)',
  )
})

test('--help anywhere among the arguments prints usage and exits 0 without listening', () => {
  const r = spawnSync(process.execPath, [exampleScript('mcp-server'), '--port', '1', '--help'], { encoding: 'utf8', timeout: 10_000 })
  expect(r.status).toBe(0)
  expect(r.stdout).toContain('usage: node dist/examples/mcp-server.js')
  expect(r.stderr).not.toContain('failed to start')
})
