/**
 * Real X.509 certificates for the TLS tests, made the way docs/operations.md tells an operator to:
 * with the `openssl` command (on macOS and every Linux distribution; Node 20 can make keys but not
 * certificates). Keys come from node:crypto (EC P-256: fast); openssl only signs. Only options LibreSSL
 * (macOS's openssl) shares with OpenSSL are used: extensions come from a config file, not -addext.
 */
import { execFileSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export interface IssuedCertificate {
  readonly certFile: string
  readonly keyFile: string
  readonly certPem: string
  readonly keyPem: string
}

export interface TestCa extends IssuedCertificate {
  /**
   * A certificate this CA signs, valid for 127.0.0.1, ::1 and localhost (a server's), or for a client
   * (`client: true`: clientAuth), or a server's valid only for wardline-admin.internal (`onlyName: true`). Files are `<name>.pem` and `<name>-key.pem` in the CA's directory.
   */
  issue(name: string, options?: { readonly commonName?: string; readonly client?: boolean; readonly onlyName?: boolean }): IssuedCertificate
}

const OPENSSL_CONFIG = `[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,IP:::1,DNS:localhost
[named]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:wardline-admin.internal
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
`

function newKey(file: string): string {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string
  writeFileSync(file, pem, { mode: 0o600 })
  return pem
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] })
}

let serial = Date.now()

/** A self-signed CA in `dir` (ca.pem, ca-key.pem), valid for two days. */
export function makeTestCa(dir: string, commonName = 'Wardline Test CA'): TestCa {
  const configFile = join(dir, 'openssl.cnf')
  writeFileSync(configFile, OPENSSL_CONFIG)
  const keyFile = join(dir, 'ca-key.pem')
  const certFile = join(dir, 'ca.pem')
  const keyPem = newKey(keyFile)
  openssl([
    'req',
    '-new',
    '-x509',
    '-key',
    keyFile,
    '-subj',
    `/CN=${commonName}`,
    '-days',
    '2',
    '-config',
    configFile,
    '-extensions',
    'ca',
    '-out',
    certFile,
  ])
  return {
    certFile,
    keyFile,
    keyPem,
    certPem: readFileSync(certFile, 'utf8'),
    issue(name, options = {}) {
      const leafKey = join(dir, `${name}-key.pem`)
      const leafCert = join(dir, `${name}.pem`)
      const csr = join(dir, `${name}.csr`)
      const leafKeyPem = newKey(leafKey)
      openssl(['req', '-new', '-key', leafKey, '-subj', `/CN=${options.commonName ?? name}`, '-config', configFile, '-out', csr])
      openssl([
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        certFile,
        '-CAkey',
        keyFile,
        '-set_serial',
        String(serial++),
        '-days',
        '2',
        '-extfile',
        configFile,
        '-extensions',
        options.client === true ? 'client' : options.onlyName === true ? 'named' : 'server',
        '-out',
        leafCert,
      ])
      return { certFile: leafCert, keyFile: leafKey, keyPem: leafKeyPem, certPem: readFileSync(leafCert, 'utf8') }
    },
  }
}
