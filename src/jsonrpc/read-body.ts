import type { IncomingMessage } from 'node:http'

export type BodyResult = { ok: true; body: Buffer } | { ok: false; tooLarge: true } | { ok: false; tooLarge: false; error: Error }

/**
 * Reads a request body, giving up as soon as it passes `maxBytes` (a declared Content-Length over the
 * cap is refused before a byte is read). The caller answers 413 and Node discards the rest.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<BodyResult> {
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > maxBytes) return Promise.resolve({ ok: false, tooLarge: true })
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let size = 0
    const onData = (chunk: Buffer): void => {
      size += chunk.length
      if (size > maxBytes) {
        cleanup()
        req.resume() // keep draining so the socket can carry our 413
        resolve({ ok: false, tooLarge: true })
        return
      }
      chunks.push(chunk)
    }
    const onEnd = (): void => {
      cleanup()
      resolve({ ok: true, body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size) })
    }
    const onError = (error: Error): void => {
      cleanup()
      resolve({ ok: false, tooLarge: false, error })
    }
    const onAborted = (): void => onError(new Error('client closed the connection before the body ended'))
    const cleanup = (): void => {
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
      req.off('close', onClose)
    }
    const onClose = (): void => {
      if (!req.complete) onAborted()
    }
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('error', onError)
    req.on('close', onClose)
  })
}
