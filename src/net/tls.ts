import { X509Certificate, createPrivateKey } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { Server as HttpsServer } from 'node:https'
import { type SecureContextOptions, createSecureContext } from 'node:tls'
import type { TlsConfig } from '../config/types'
import { WardlineError, describeError } from '../errors'
import type { Logger } from '../log'

/**
 * TLS 1.0 and 1.1 are deprecated (RFC 8996); Node's own default minimum is 1.2 already, but a
 * `--tls-min-v1.0` flag or NODE_OPTIONS would lower it: the gateway pins it on every context.
 */
export const MIN_TLS_VERSION = 'TLSv1.2'

/** What a listener is given: the context options and what the logs say about the certificate. */
export interface TlsMaterial {
  readonly context: SecureContextOptions & { readonly minVersion: typeof MIN_TLS_VERSION }
  /** The leaf certificate's subject, names, expiry and fingerprint, for the startup and reload lines. */
  readonly described: Readonly<Record<string, string>>
}

/**
 * Reads and checks a listener's files (`key`: `tls` or `admin.tls`): each readable, each PEM of its
 * kind, the private key the one of the first certificate in cert_file. Any fault is a
 * WL_CONFIG_INVALID error naming the key and the file, before a socket is opened or a context replaced.
 */
export function readTlsFiles(settings: TlsConfig, key: string): TlsMaterial {
  const certPem = readPem(settings.certFile, `${key}.cert_file`)
  const keyPem = readPem(settings.keyFile, `${key}.key_file`)
  const caPem = settings.caFile === null ? null : readPem(settings.caFile, `${key}.ca_file`)
  const leaf = certificate(certPem, settings.certFile, `${key}.cert_file`)
  let privateKey
  try {
    privateKey = createPrivateKey(keyPem)
  } catch (err) {
    throw invalid(`${key}.key_file`, settings.keyFile, `is not an unencrypted PEM private key (${describeError(err)})`, err)
  }
  if (!leaf.checkPrivateKey(privateKey)) {
    throw invalid(
      `${key}.key_file`,
      settings.keyFile,
      `is not the private key of the certificate in ${settings.certFile} (the first certificate there must be the server's own)`,
    )
  }
  if (caPem !== null) certificate(caPem, settings.caFile as string, `${key}.ca_file`)
  const context = { cert: certPem, key: keyPem, ...(caPem === null ? {} : { ca: caPem }), minVersion: MIN_TLS_VERSION } as const
  try {
    // What the listener will do with them: a chain OpenSSL refuses fails here, not at the first handshake.
    createSecureContext(context)
  } catch (err) {
    throw invalid(`${key}.cert_file`, settings.certFile, `cannot be used by TLS (${describeError(err)})`, err)
  }
  return {
    context,
    described: {
      subject: leaf.subject.replace(/\n/g, ', '),
      names: leaf.subjectAltName ?? '',
      not_after: new Date(leaf.validTo).toISOString(),
      sha256: leaf.fingerprint256,
    },
  }
}

/**
 * SIGHUP: re-reads the files and gives the listener the new context. Connections already open keep the
 * one they were made with (a TLS session does not change keys midway), new ones get the new one. Files
 * that fail readTlsFiles keep the running context, and the reason is logged at error. True when replaced.
 */
export function reloadTls(server: HttpsServer, settings: TlsConfig, key: string, log: Logger): boolean {
  let material: TlsMaterial
  try {
    material = readTlsFiles(settings, key)
  } catch (err) {
    log.error('tls certificate reload rejected: the listener keeps the certificate it had', {
      key,
      error: describeError(err),
    })
    return false
  }
  server.setSecureContext(material.context)
  log.info('tls certificate reloaded: new connections get it, open ones keep theirs', { key, ...material.described })
  return true
}

/** Logs the certificate a listener starts with, and a warning when it is already expired or soon will be. */
export function logCertificate(log: Logger, key: string, material: TlsMaterial): void {
  log.info('tls certificate loaded', { key, ...material.described })
  const left = Date.parse(material.described.not_after) - Date.now()
  if (left < 0) log.warn('tls certificate has expired: clients will refuse it', { key, not_after: material.described.not_after })
  else if (left < 14 * 86_400_000) {
    log.warn('tls certificate expires within 14 days: renew it and send SIGHUP', { key, not_after: material.described.not_after })
  }
}

function readPem(path: string, key: string): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    throw invalid(key, path, `cannot be read (${(err as NodeJS.ErrnoException).code ?? describeError(err)})`, err)
  }
  if (!text.includes('-----BEGIN ')) throw invalid(key, path, 'is not PEM (no -----BEGIN line)')
  return text
}

/** The first certificate of a PEM file (X509Certificate reads the first block). */
function certificate(pem: string, path: string, key: string): X509Certificate {
  try {
    return new X509Certificate(pem)
  } catch (err) {
    throw invalid(key, path, `is not a PEM certificate (${describeError(err)})`, err)
  }
}

function invalid(key: string, path: string, why: string, cause?: unknown): WardlineError {
  return new WardlineError('WL_CONFIG_INVALID', `${key}: ${path} ${why}`, cause === undefined ? undefined : { cause })
}
