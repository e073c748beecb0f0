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

  /**
   * Whether every string of a family matches: `parts` are literal texts with any text between each two
   * (at least two parts). Sound, not complete: false when unsure (a pattern with middle segments).
   */
  coversEvery(parts: readonly string[]): boolean {
    if (this.any) return true
    if (this.exact || this.middle.length > 0) return false
    // The family's strings start with its first part and end with its last, which never overlap.
    return parts[0].startsWith(this.head) && parts[parts.length - 1].endsWith(this.tail)
  }

  /**
   * Whether some string of a family (as in coversEvery) may match. Sound, not complete: true when
   * unsure; false only when the literal starts or ends disagree, or an exact pattern is outside it.
   */
  meetsSome(parts: readonly string[]): boolean {
    // A literal `*` in a part becomes a wildcard here: a wider family, so still sound.
    if (this.exact) return new Glob(parts.join('*')).matches(this.pattern)
    const first = parts[0]
    const last = parts[parts.length - 1]
    const headsAgree = first.startsWith(this.head) || this.head.startsWith(first)
    const tailsAgree = last.endsWith(this.tail) || this.tail.endsWith(last)
    return headsAgree && tailsAgree
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
