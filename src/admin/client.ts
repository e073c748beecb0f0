import { X509Certificate } from 'node:crypto'
import { userInfo } from 'node:os'
import { type PeerCertificate, checkServerIdentity, rootCertificates } from 'node:tls'
import { Agent, fetch as undiciFetch } from 'undici'
import type { AdminConfig } from '../config/types'

/** Why an admin call did not get an answer it could use; `message` is what the CLI prints. */
export class AdminClientError extends Error {
  constructor(
    message: string,
    /** The HTTP status, when the API answered. */
    readonly status: number | null = null,
  ) {
    super(message)
    this.name = 'AdminClientError'
  }
}

/**
 * Where to reach the admin API from this host: admin.listen, with a wildcard host (0.0.0.0, ::) read
 * as the loopback address of its family (a listener on every interface is on loopback too).
 */
export function adminBaseUrl(admin: AdminConfig): string {
  const { host, port } = admin.listen
  const reach = host === '0.0.0.0' || host === '*' ? '127.0.0.1' : host === '::' ? '::1' : host
  return `${admin.tls === null ? 'http' : 'https'}://${reach.includes(':') ? `[${reach}]` : reach}:${port}`
}

export interface AdminCall {
  readonly method: 'GET' | 'POST' | 'DELETE'
  /** Path and query, e.g. `/budgets?identity=alice`. */
  readonly path: string
  readonly body?: unknown
  readonly timeoutMs?: number
  /**
   * With admin.tls: the PEM of admin.tls.cert_file, which the CLI reads from the same config as the
   * gateway. Its first certificate is trusted as it is, whatever name it was issued for (the CLI dials
   * 127.0.0.1, rarely a name on a certificate); any other certificate must chain to the system CAs and
   * name the host as usual.
   */
  readonly trust?: string
}

/**
 * Calls the admin API with the configured token and returns the JSON answer of a 2xx. Anything else
 * is an AdminClientError saying what to check: the gateway not running or not reachable, the token
 * refused, or the API's own message for a refused request.
 */
export async function callAdmin(baseUrl: string, token: string, call: AdminCall): Promise<unknown> {
  const timeoutMs = call.timeoutMs ?? 10_000
  let res: Response
  const dispatcher = call.trust === undefined ? undefined : pinnedAgent(call.trust)
  try {
    res = await (dispatcher === undefined ? fetch : (undiciFetch as unknown as typeof fetch))(`${baseUrl}${call.path}`, {
      ...(dispatcher === undefined ? {} : ({ dispatcher } as object)),
      method: call.method,
      headers: {
        authorization: `Bearer ${token}`,
        'x-wardline-operator': operatorName(),
        ...(call.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal: AbortSignal.timeout(timeoutMs),
    })
  } catch (err) {
    await dispatcher?.close()
    throw failed(err, baseUrl, timeoutMs, call.method)
  }
  let text: string
  try {
    // The timeout covers the body too: a gateway that sent its headers and then hung ends here.
    text = await res.text()
  } catch (err) {
    throw failed(err, baseUrl, timeoutMs, call.method)
  } finally {
    await dispatcher?.close()
  }
  let body: unknown
  try {
    body = text === '' ? null : JSON.parse(text)
  } catch {
    throw new AdminClientError(
      `the admin API at ${baseUrl} answered ${res.status} with a body that is not JSON: is admin.listen another server?`,
      res.status,
    )
  }
  if (res.ok) return body
  const message = (body as { error?: unknown } | null)?.error
  if (res.status === 401) {
    throw new AdminClientError(`the admin API refused the token (401): admin.token in this config differs from the running gateway's`, 401)
  }
  throw new AdminClientError(`${res.status}: ${typeof message === 'string' ? message : text.trim()}`, res.status)
}

/**
 * A connection pool that trusts the certificates of `pem` besides the system's (partial chains
 * allowed, so a leaf in the file is a trust anchor by itself) and accepts its first certificate for any
 * host name: the CLI pins what the gateway was configured to serve.
 */
function pinnedAgent(pem: string): Agent {
  let pinned: string | null = null
  try {
    pinned = new X509Certificate(pem).fingerprint256
  } catch {
    // Not a certificate: nothing pinned; the system CAs and the host name decide, and say why not.
  }
  return new Agent({
    connect: {
      ca: [...rootCertificates, pem],
      allowPartialTrustChain: true,
      checkServerIdentity: (host: string, cert: PeerCertificate) =>
        cert.fingerprint256 === pinned ? undefined : checkServerIdentity(host, cert),
    },
  })
}

/** Why no usable answer came: the timeout, or the connection (refused, reset, …). */
function failed(err: unknown, baseUrl: string, timeoutMs: number, method: AdminCall['method']): AdminClientError {
  const e = err as Error & { cause?: { code?: string } }
  if (e.name === 'TimeoutError') {
    // A revoke or reset waiting on a hung database may still be applied after we stop waiting.
    const change = method === 'GET' ? '' : ' (the change may still be applied: check before retrying)'
    return new AdminClientError(`the admin API at ${baseUrl} did not answer within ${timeoutMs / 1000} s${change}`)
  }
  const code = e.cause?.code ?? e.message
  if (/CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO/.test(code)) {
    return new AdminClientError(
      `the admin API at ${baseUrl} presented a certificate the CLI does not accept (${code}): it trusts admin.tls.cert_file of this config and the system CAs (send the gateway SIGHUP after renewing the file)`,
    )
  }
  return new AdminClientError(`cannot reach the admin API at ${baseUrl} (${code}): is the gateway running with this admin.listen?`)
}

/** The local user, for the audit trail's `admin:<name>` (a hint, not an identity). */
function operatorName(): string {
  try {
    return userInfo()
      .username.replace(/[^\x20-\x7e]/g, '')
      .slice(0, 64)
  } catch {
    return ''
  }
}
