/**
 * TLS through a real `wardline serve`: `kill -HUP` swaps the certificate for new connections (the
 * path operators use after a renewal), the admin CLI speaks to an admin.tls listener, and bad files
 * stop startup with one record naming the key and the file.
 */
import { X509Certificate } from 'node:crypto'
import { copyFileSync, writeFileSync } from 'node:fs'
import { request } from 'node:https'
import { join } from 'node:path'
import type { TLSSocket } from 'node:tls'
import yaml from 'js-yaml'
import { freePort, killServed, runCli, startServe } from '../helpers/cli'
import { makeTestCa } from '../helpers/certificates'
import { tempDir } from '../helpers/harness'
import { waitFor } from '../helpers/wait'

const ADMIN_TOKEN = 'b'.repeat(64)

/** The certificate a new TLS connection to the port is shown, after a 200 from /healthz. */
function servedCertificate(port: number, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/healthz', ca, agent: false }, (res) => {
      const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256
      res.resume()
      res.on('end', () => (res.statusCode === 200 ? resolve(fingerprint) : reject(new Error(`status ${res.statusCode}`))))
    })
    req.on('error', reject)
    req.end()
  })
}

afterEach(() => killServed())

test('kill -HUP serves the renewed certificate to new connections, and the admin CLI reaches admin.tls', async () => {
  const dir = tempDir('wardline-tls-serve-')
  const ca = makeTestCa(dir)
  const first = ca.issue('first')
  const live = { cert: join(dir, 'live.pem'), key: join(dir, 'live-key.pem') }
  copyFileSync(first.certFile, live.cert)
  copyFileSync(first.keyFile, live.key)
  const adminPort = await freePort()
  const file = join(dir, 'wardline.yaml')
  writeFileSync(
    file,
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      tls: { cert_file: 'live.pem', key_file: 'live-key.pem' }, // relative to the config file
      admin: { listen: `127.0.0.1:${adminPort}`, token: ADMIN_TOKEN, tls: { cert_file: first.certFile, key_file: first.keyFile } },
    }),
  )
  const served = await startServe(file)
  expect(served.stderr()).toContain('"tls":"on"')
  expect(await servedCertificate(served.port, ca.certPem)).toBe(new X509Certificate(first.certPem).fingerprint256)

  const second = ca.issue('second')
  copyFileSync(second.certFile, live.cert)
  copyFileSync(second.keyFile, live.key)
  served.child.kill('SIGHUP')
  await waitFor(() => served.stderr().includes('tls certificate reloaded'), { what: 'the certificate reload to be logged' })
  expect(await servedCertificate(served.port, ca.certPem)).toBe(new X509Certificate(second.certPem).fingerprint256)

  const listed = runCli(['revoke', '--list', '--config', file])
  expect(listed).toMatchObject({ code: 0, stdout: 'no revocations in force\n' })
  expect(await served.stop()).toBe(0)
})

test('a key file that does not match stops startup with one WL_CONFIG_INVALID record naming the key and both files', () => {
  const dir = tempDir('wardline-tls-serve-')
  const ca = makeTestCa(dir)
  const leaf = ca.issue('leaf')
  const file = join(dir, 'wardline.yaml')
  writeFileSync(
    file,
    yaml.dump({
      listen: '127.0.0.1:0',
      upstream: 'http://127.0.0.1:1',
      auth: { mode: 'header' },
      audit: { output: join(dir, 'audit.jsonl') },
      tls: { cert_file: leaf.certFile, key_file: ca.keyFile },
    }),
  )
  const run = runCli(['serve', '--config', file])
  expect(run.code).toBe(1)
  const record = JSON.parse(run.stderr.trim().split('\n').at(-1) as string) as Record<string, unknown>
  expect(record).toMatchObject({ level: 'error', code: 'WL_CONFIG_INVALID' })
  expect(record.message).toBe(
    `cannot start: tls.key_file: ${ca.keyFile} is not the private key of the certificate in ${leaf.certFile} (the first certificate there must be the server's own)`,
  )
})
