/**
 * A policy name pattern: `*` matches any run of characters (including none), every other character is
 * itself. Hand-written rather than a RegExp: names come from callers, and a pattern such as `*a*a*a*b`
 * turned into `.*a.*a.*a.*b` backtracks polynomially on a long name, while the segment scan below is
 * one left-to-right pass (each segment's leftmost fit is always the best one when `*` is the only
 * wildcard). Nothing in a name or a pattern is ever interpreted: no regex injection.
 */
export class Glob {
  /** True when the pattern has no `*`: it matches one string, and policy compilation can index it. */
  readonly exact: boolean
  /** True when the pattern is only stars: it matches everything, the empty string included. */
  readonly any: boolean
  private readonly head: string
  private readonly tail: string
  private readonly middle: readonly string[]
  private readonly minLength: number

  constructor(readonly pattern: string) {
    const parts = pattern.split('*')
    this.exact = parts.length === 1
    this.head = parts[0]
    this.tail = this.exact ? '' : parts[parts.length - 1]
    this.middle = parts.slice(1, -1).filter((part) => part.length > 0)
    this.any = !this.exact && this.head === '' && this.tail === '' && this.middle.length === 0
    this.minLength = this.head.length + this.tail.length + this.middle.reduce((sum, part) => sum + part.length, 0)
  }

  matches(text: string): boolean {
    if (this.exact) return text === this.pattern
    if (this.any) return true
    if (text.length < this.minLength || !text.startsWith(this.head) || !text.endsWith(this.tail)) return false
    // Middle segments must fit, in order, between the head and the tail without overlapping either.
    const end = text.length - this.tail.length
    let at = this.head.length
    for (let i = 0; i < this.middle.length; i++) {
      const segment = this.middle[i]
      const found = text.indexOf(segment, at)
      if (found < 0 || found + segment.length > end) return false
      at = found + segment.length
    }
    return true
  }
}
