import { randomFillSync } from 'node:crypto'

/**
 * A random (version 4) UUID in its lower-case 8-4-4-4-12 text, as `crypto.randomUUID()` gives it,
 * for the id every request gets. randomUUID joins twenty short strings into one, about 600 bytes of
 * garbage a request on the allow path; here the hex digits go into one reused buffer and the text is
 * one string copied out of it. The random bytes come from the same source (randomFillSync), drawn for
 * 128 ids at a time as randomUUID does, and each byte is used for one id only.
 */
const BATCH = 128
const random = Buffer.alloc(16 * BATCH)
let next = BATCH
const text = Buffer.from('00000000-0000-0000-0000-000000000000', 'latin1')
const HEX = Buffer.from('0123456789abcdef', 'latin1')
/** Where the two hex digits of each of the 16 bytes go in the text. */
const AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34]

export function requestId(): string {
  if (next === BATCH) {
    randomFillSync(random)
    next = 0
  }
  const from = next++ * 16
  for (let k = 0; k < 16; k++) {
    let byte = random[from + k]
    // RFC 9562 §5.4: the version (4) in the high nibble of byte 6, the variant (0b10) in the top bits of byte 8.
    if (k === 6) byte = (byte & 0x0f) | 0x40
    else if (k === 8) byte = (byte & 0x3f) | 0x80
    const at = AT[k]
    text[at] = HEX[byte >> 4]
    text[at + 1] = HEX[byte & 0x0f]
  }
  return text.toString('latin1', 0, 36)
}
