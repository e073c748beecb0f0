import { MAX_QUOTED_NAME_CHARS, escapeControls, quotedName } from '../src/escape'

/**
 * Default_Ignorable_Code_Point as Unicode's DerivedCoreProperties.txt lists it (unchanged from
 * Unicode 14, which added U+180F, to Unicode 17): what a terminal or a model shows as nothing.
 */
const DEFAULT_IGNORABLE: ReadonlyArray<readonly [number, number]> = [
  [0x00ad, 0x00ad],
  [0x034f, 0x034f],
  [0x061c, 0x061c],
  [0x115f, 0x1160],
  [0x17b4, 0x17b5],
  [0x180b, 0x180f],
  [0x200b, 0x200f],
  [0x202a, 0x202e],
  [0x2060, 0x206f],
  [0x3164, 0x3164],
  [0xfe00, 0xfe0f],
  [0xfeff, 0xfeff],
  [0xffa0, 0xffa0],
  [0xfff0, 0xfff8],
  [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a],
  [0xe0000, 0xe0fff],
]

/** What must be escaped besides: the controls (C0, DEL, C1) and the line and paragraph separators. */
function mustEscape(code: number): boolean {
  if (code < 0x20 || (code >= 0x7f && code <= 0x9f) || code === 0x2028 || code === 0x2029) return true
  if (code >= 0xd800 && code <= 0xdfff) return true // a lone surrogate
  return DEFAULT_IGNORABLE.some(([from, to]) => code >= from && code <= to)
}

describe('escapeControls', () => {
  test('escapes exactly the controls, the separators, lone surrogates and every Default_Ignorable_Code_Point, over all of Unicode', () => {
    const wrong: string[] = []
    for (let code = 0; code <= 0x10ffff; code++) {
      const c = String.fromCodePoint(code)
      const escaped = escapeControls(c, false) !== c
      if (escaped !== mustEscape(code)) wrong.push(`U+${code.toString(16).padStart(4, '0')} ${escaped ? 'escaped' : 'kept'}`)
    }
    expect(wrong).toEqual([])
  })

  test('an escape names the code point: \\xNN, \\uNNNN, and \\u{…} beyond the BMP', () => {
    expect(escapeControls('a\x1b[2Jb\x9b\u034f\u3164\ufe0f', false)).toBe('a\\x1b[2Jb\\x9b\\u034f\\u3164\\ufe0f')
    expect(escapeControls('alice\u{e0041}\u{e007f}\u{e0100}', false)).toBe('alice\\u{e0041}\\u{e007f}\\u{e0100}')
    expect(escapeControls('a\nb\tc', false)).toBe('a\\x0ab\\x09c')
    expect(escapeControls('a\nb\tc')).toBe('a\\nb\\tc')
    // Visible text beyond the BMP and combining marks are not touched.
    expect(escapeControls('café 😀 e\u0301', false)).toBe('café 😀 e\u0301')
    expect(escapeControls('\ud800x', false)).toBe('\\ud800x')
  })
})

describe('quotedName', () => {
  test('a plain name is quoted as it is', () => {
    expect(quotedName('search')).toBe('"search"')
    expect(quotedName('déjà_vu.😀')).toBe('"déjà_vu.😀"')
  })

  test('quotes, backslashes, controls, separators and invisible characters are escaped', () => {
    expect(quotedName('a"b\\c')).toBe('"a\\"b\\\\c"')
    expect(quotedName('x\ny\r\u0085\u2028\u2029\u202e\u2066\u200b\u{e0041}')).toBe(
      '"x\\x0ay\\x0d\\x85\\u2028\\u2029\\u202e\\u2066\\u200b\\u{e0041}"',
    )
  })

  test('cut to 64 characters between the quotes, never inside an escape or a character, with … after the quotes', () => {
    const long = 'a'.repeat(100)
    expect(quotedName(long)).toBe(`"${'a'.repeat(MAX_QUOTED_NAME_CHARS)}"…`)
    expect(quotedName('a'.repeat(64))).toBe(`"${'a'.repeat(64)}"`)
    // 62 visible characters, then an escape of 6 that would not fit whole.
    expect(quotedName(`${'b'.repeat(62)}\u2028tail`)).toBe(`"${'b'.repeat(62)}"…`)
    // Astral characters count once each and are never split into halves.
    expect(quotedName('😀'.repeat(70))).toBe(`"${'😀'.repeat(64)}"…`)
  })
})
