/**
 * Red team (terminals): lookalike identities must not read as `alice` in a CLI
 * table. Every Default_Ignorable_Code_Point is escaped, but characters a terminal draws as blank
 * space are not default-ignorable: U+2800 BRAILLE PATTERN BLANK passes checkPrincipal (it is no `\s`),
 * so a token whose subject is `alice⠀` is an identity of its own that `wardline audit` and
 * `wardline revoke --list` show as `alice` followed by padding. Tool names and other cells may also
 * end in U+00A0, U+2003, U+3000 (a caller's tool name is not trimmed), which pad like spaces.
 */
import { checkPrincipal } from '../../src/auth/principal'
import { terminalTable } from '../../src/terminal-table'

/** Characters a terminal renders as blank space: not controls, not default-ignorable. */
const BLANKS = ['\u2800', '\u00a0', '\u2003', '\u3000', '\u205f', '\u202f']

test('U+2800 is a valid identity of its own: alice⠀ is not alice', () => {
  expect(checkPrincipal('identity', 'alice\u2800')).toBeNull()
})

test.each(BLANKS.map((c) => [`U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`, c]))(
  'a cell ending in %s does not render as the cell without it',
  (_name, blank) => {
    const lines = terminalTable(
      ['identity', 'decision'],
      [
        ['alice', 'deny'],
        [`alice${blank}`, 'allow'],
      ],
    ).split('\n')
    // What an operator sees of the identity column: the first column up to its padding.
    const shown = lines.slice(1).map((line) => line.slice(0, line.indexOf('  ')).replace(/[\s\u2800]+$/u, ''))
    expect(shown[1]).not.toBe(shown[0])
  },
)
