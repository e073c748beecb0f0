/**
 * The process-level handlers of `wardline serve` (cli/serve.ts handleProcessFailures): an unhandled
 * rejection is logged and the gateway keeps serving; an uncaught exception stops it gracefully (the
 * audit trail flushed) and the process exits 1. A real `wardline serve` with a module preloaded
 * that makes the fault when told to (SIGUSR2: first a rejection nobody handles, then a throw nobody
 * catches), both from outside any request, as a background task's would be.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import yaml from 'js-yaml'
import { type ExampleServer, startExampleServer } from '../../examples/mcp-server'
import { killServed, logRecords, startServe } from '../helpers/cli'
import { MCP_HEADERS, as, readJsonl, tempDir, toolCall } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const FAULTS = `
let faults = 0
process.on('SIGUSR2', () => {
  faults++
  if (faults === 1) Promise.reject(new Error('rejected for this test'))
  else setImmediate(() => { throw new Error('thrown for this test') })
})
`

describe('wardline serve, a fault outside any request', () => {
  let upstream: ExampleServer | null = null
  afterEach(async () => {
    killServed()
    await upstream?.close()
    upstream = null
  })

  test('an unhandled rejection is logged and serving goes on; an uncaught exception flushes the audit trail and exits 1', async () => {
    upstream = await startExampleServer({ mode: 'stateless-json' })
    const dir = tempDir()
    const preload = join(dir, 'faults.js')
    writeFileSync(preload, FAULTS)
    const auditFile = join(dir, 'audit.jsonl')
    const file = join(dir, 'wardline.yaml')
    writeFileSync(
      file,
      yaml.dump({
        listen: '127.0.0.1:0',
        upstream: upstream.url,
        auth: { mode: 'header' },
        audit: { output: auditFile },
        log_format: 'json',
        shutdown_grace_seconds: 1,
      }),
    )
    const served = await startServe(file, ['--require', preload])
    const call = async (n: number): Promise<number> => {
      const res = await fetch(`${served.url}/mcp`, {
        method: 'POST',
        headers: { ...as('alice'), ...MCP_HEADERS },
        body: JSON.stringify(toolCall('echo', { message: `m${n}` }, n)),
      })
      await res.text()
      return res.status
    }
    expect(await call(1)).toBe(200)
    served.child.kill('SIGUSR2')
    await waitFor(() => served.stderr().includes('unhandled promise rejection'), { what: 'the rejection to be logged' })
    expect(await call(2)).toBe(200) // still serving
    served.child.kill('SIGUSR2')
    expect(await served.exited).toBe(1)
    const logged = logRecords(served.stderr())
    expect(logged.find((r) => r.message === 'unhandled promise rejection: the gateway keeps serving')).toMatchObject({
      level: 'error',
      code: 'WL_INTERNAL',
      error: 'rejected for this test',
    })
    expect(logged.find((r) => String(r.message).startsWith('uncaught exception: stopping the gateway'))).toMatchObject({
      level: 'error',
      error: 'thrown for this test',
    })
    expect(logged.some((r) => r.message === 'wardline stopped')).toBe(true)
    // Both calls are in the trail: it was flushed before the exit.
    expect(readJsonl(auditFile).map((e) => [e.tool, e.status])).toEqual([
      ['echo', 200],
      ['echo', 200],
    ])
  })
})
