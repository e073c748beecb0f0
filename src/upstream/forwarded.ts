import type { IncomingMessage } from 'node:http'
import { BlockList, isIPv4 } from 'node:net'

/**
 * The X-Forwarded-* headers the upstream gets: who the client is (For), which Host it addressed
 * (Host: the gateway rewrites Host for the upstream, so this is the only place the upstream can still
 * see it) and over what (Proto). The client's own copies (and an RFC 7239 Forwarded) are dropped in
 * headers.ts: anyone can write "X-Forwarded-For: 10.0.0.1". Only from a peer in trusted_proxies (a
 * load balancer in front of the gateway) is the incoming chain kept and extended.
 */
export class ForwardedHeaders {
  /** Null when no proxy is trusted: nothing to look up per request. */
  private readonly trusted: BlockList | null

  constructor(trustedProxies: readonly string[]) {
    if (trustedProxies.length === 0) {
      this.trusted = null
      return
    }
    const list = new BlockList()
    for (const entry of trustedProxies) {
      const [address, bits] = entry.split('/')
      const family = isIPv4(address) ? 'ipv4' : 'ipv6'
      if (bits === undefined) list.addAddress(address, family)
      else list.addSubnet(address, Number(bits), family)
    }
    this.trusted = list
  }

  /** Appends X-Forwarded-For, -Host, -Proto (and a trusted peer's Forwarded) to a flat header list. */
  push(req: IncomingMessage, out: string[]): void {
    const peer = peerAddress(req.socket.remoteAddress)
    const h = req.headers
    if (this.trusted !== null && peer !== '' && this.trusted.check(peer, isIPv4(peer) ? 'ipv4' : 'ipv6')) {
      const prior = headerValue(h['x-forwarded-for'])
      out.push('x-forwarded-for', prior ? `${prior}, ${peer}` : peer)
      const host = headerValue(h['x-forwarded-host']) ?? h.host
      if (host !== undefined) out.push('x-forwarded-host', host)
      out.push('x-forwarded-proto', headerValue(h['x-forwarded-proto']) ?? schemeOf(req))
      const forwarded = headerValue(h.forwarded)
      if (forwarded !== undefined) out.push('forwarded', forwarded)
      return
    }
    if (peer !== '') out.push('x-forwarded-for', peer)
    if (h.host !== undefined) out.push('x-forwarded-host', h.host)
    // What this connection is: TLS ends here (tls:) or, for plain HTTP, at a proxy in front, which must
    // be trusted to say so.
    out.push('x-forwarded-proto', schemeOf(req))
  }
}

/** `https` on a connection the gateway's own TLS listener accepted, else `http`. */
export function schemeOf(req: IncomingMessage): 'http' | 'https' {
  return (req.socket as { encrypted?: boolean }).encrypted === true ? 'https' : 'http'
}

/** An IPv4 client of a dual-stack listener shows as ::ffff:10.1.2.3; the chain names it 10.1.2.3. */
function peerAddress(remote: string | undefined): string {
  if (remote === undefined) return '' // the socket is already gone
  return remote.startsWith('::ffff:') && isIPv4(remote.slice(7)) ? remote.slice(7) : remote
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value
}
