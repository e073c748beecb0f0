/**
 * Red team (ops): a SIGHUP storm against a real `wardline serve` (logrotate in a loop, a script that
 * signals every replica at once) while requests arrive and the file is being rewritten: the gateway
 * keeps serving, every request is audited exactly once in the reopened file, and every log line is a
 * record.
 */
import { readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { killServed, startServe } from '../helpers/cli'
import { tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

afterEach(() => killServed())

test('90 SIGHUPs during 60 requests, 10 rewrites of the file and 10 rotations of the trail: still serving, every request audited once', async () => {
  const dir = tempDir('wardline-redteam-ops-hup-')
  const file = join(dir, 'wardline.yaml')
  const trail = join(dir, 'audit.jsonl')
  const tree = (n: number): Record<string, unknown> => ({
    listen: '127.0.0.1:0',
    upstream: 'http://127.0.0.1:1',
    auth: { mode: 'header' },
    audit: { output: trail },
    policy: { default: 'allow', rules: [{ identity: `blocked-${n}`, tool: '*', effect: 'deny' }] },
  })
  writeFileSync(file, yaml.dump(tree(0)))
  const served = await startServe(file)
  const call = (i: number): Promise<number> =>
    fetch(`${served.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-wardline-identity': 'alice' },
      body: JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'echo', arguments: {} } }),
    }).then(async (r) => {
      await r.arrayBuffer()
      return r.status
    })
  const statuses: Promise<number>[] = []
  for (let i = 0; i < 60; i++) {
    statuses.push(call(i))
    if (i % 6 === 0) {
      // Half the rewrites are in place (a reload may read a truncated file), half are atomic renames.
      if (i % 12 === 0) writeFileSync(file, yaml.dump(tree(i)))
      else {
        writeFileSync(`${file}.new`, yaml.dump(tree(i)))
        renameSync(`${file}.new`, file)
      }
    }
    if (i % 6 === 3) {
      // Rotation: move the trail away; the next reopen starts a new file.
      try {
        renameSync(trail, `${trail}.${i}`)
      } catch {
        // nothing written yet
      }
    }
    served.child.kill('SIGHUP')
    if (i % 2 === 0) served.child.kill('SIGHUP')
    await new Promise((resolve) => setImmediate(resolve))
  }
  const codes = await Promise.all(statuses)
  // A dead upstream: each call gets the gateway's own answer, never a dropped connection.
  expect(new Set(codes).size).toBeGreaterThan(0)
  for (const code of codes) expect(code).toBeGreaterThanOrEqual(200)
  // Still serving after the storm.
  expect(await call(1000)).toBe(codes[0])
  /** Request ids in the trail and every rotated piece of it. */
  const audited = (): string[] =>
    readdirSync(dir)
      .filter((name) => name.startsWith('audit.jsonl'))
      .flatMap((name) => readFileSync(join(dir, name), 'utf8').split('\n'))
      .filter((line) => line !== '')
      .map((line) => (JSON.parse(line) as { request_id: string }).request_id)
  await waitFor(() => audited().length >= 61, { what: 'all 61 calls to be audited' })
  const requestIds = audited()
  expect(requestIds).toHaveLength(61)
  expect(new Set(requestIds).size).toBe(61)
  // Every stderr line is a JSON record; the process did not die of a signal.
  for (const line of served.stderr().trimEnd().split('\n')) expect(() => JSON.parse(line) as unknown).not.toThrow()
  expect(served.stderr()).toContain('configuration reloaded')
  expect(served.child.exitCode).toBeNull()
  expect(await served.stop()).toBe(0)
})
