// Red team: the admin API while the audit queue is full. The sink is a FIFO whose
// reader (this test) stops reading, so the audit write really blocks (as in test/e2e/audit-volume).
import { execFileSync } from 'node:child_process'
import { closeSync, constants, openSync, readSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import type { AuditEntry } from '../../src/audit/entry'
import { type Harness, startHarness, tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const TOKEN = 'redteam-admin-audit-full-token-0123456789abcdef'

let h: Harness
let reader = -1
let text = ''
const fifo = join(tempDir(), 'audit.fifo')

beforeAll(async () => {
  execFileSync('mkfifo', [fifo])
  reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
  h = await startHarness({
    mode: 'stateless-json',
    config: { audit: { output: fifo, max_queue_entries: 100 }, admin: { listen: '127.0.0.1:0', token: TOKEN } },
  })
  fillPipe(fifo)
})
afterAll(async () => {
  readAvailable()
  await h.close()
  closeSync(reader)
})

function readAvailable(): void {
  const buf = Buffer.alloc(1 << 16)
  for (;;) {
    let n: number
    try {
      n = readSync(reader, buf)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return
      throw err
    }
    if (n === 0) return
    text += buf.toString('utf8', 0, n)
  }
}

function entries(): AuditEntry[] {
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as AuditEntry)
}

function fillPipe(path: string): void {
  const fd = openSync(path, constants.O_WRONLY | constants.O_NONBLOCK)
  try {
    for (const chunk of [Buffer.alloc(4096, 0x0a), Buffer.alloc(1, 0x0a)]) {
      for (;;) {
        try {
          writeSync(fd, chunk)
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break
          throw err
        }
      }
    }
  } finally {
    closeSync(fd)
  }
}

/** wardline_audit_dropped_total, whatever its labels (one sink here). */
async function droppedTotal(): Promise<number> {
  const m = /^wardline_audit_dropped_total(?:\{[^}]*\})? (\S+)$/m.exec(await (await fetch(`${h.url}/metrics`)).text())
  return m === null ? 0 : Number(m[1])
}

async function adminCall(
  method: string,
  path: string,
  token = TOKEN,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${h.gateway.adminUrl as string}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: res.status, body: (await res.json()) as Record<string, unknown> }
}

test('a full audit queue: no admin action runs, refusals are answered, and their dropped entries are counted', async () => {
  // Fill the queue with audited admin reads until one is refused for want of a slot.
  let listed = 0
  for (;;) {
    const r = await adminCall('GET', '/revocations')
    if (r.status === 503) break
    expect(r.status).toBe(200)
    listed++
    expect(listed).toBeLessThan(200)
  }
  const revoke = await adminCall('POST', '/revocations', TOKEN, { identity: 'nobody', tenant: 'acme' })
  expect(revoke).toEqual({ status: 503, body: { error: 'the audit trail is full: no admin action runs unaudited; try again shortly' } })
  expect(await h.gateway.revocations.list()).toEqual([])
  const reset = await adminCall('DELETE', '/budgets?identity=nobody')
  expect(reset.status).toBe(503)

  const dropped = await droppedTotal()
  expect((await adminCall('GET', '/revocations', 'x'.repeat(40))).status).toBe(401)
  expect((await adminCall('GET', '/nowhere')).status).toBe(404)
  // docs/operations.md (admin, Audit): these entries are dropped and counted, not written.
  expect(await droppedTotal()).toBe(dropped + 2)

  // The reader comes back: every call that got a slot is in the trail; the refused ones are not.
  await waitFor(
    () => {
      readAvailable()
      return entries().filter((e) => e.method === 'admin/revocations.list' && e.status === 200).length >= listed
    },
    { what: 'the admin entries that held a slot' },
  )
  await h.gateway.audit.flush()
  readAvailable()
  const admin = entries().filter((e) => e.method.startsWith('admin/'))
  expect(admin.filter((e) => e.status === 200)).toHaveLength(listed)
  expect(admin.filter((e) => e.method === 'admin/revocations.create')).toEqual([])
  expect(JSON.stringify(admin)).not.toContain(TOKEN)
})
