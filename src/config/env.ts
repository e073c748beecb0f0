import type { Reader } from './reader'

const REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g

/**
 * Replaces `${VAR}` and `${VAR:-default}` in every string of the tree, so secrets come from the
 * environment and never sit in the file. A missing variable with no default is a problem naming it
 * (never its would-be value). `$${` escapes a literal `${`.
 */
export function expandEnv(value: unknown, path: string, env: NodeJS.ProcessEnv, r: Reader): unknown {
  if (typeof value === 'string') return expandString(value, path, env, r)
  if (Array.isArray(value)) return value.map((item, i) => expandEnv(item, `${path}[${i}]`, env, r))
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, child] of Object.entries(value)) {
      // Defined, not assigned: `out["__proto__"] = …` would set the prototype, and the key (a tenant
      // named __proto__, or an unknown key that must be reported) would vanish without a word.
      Object.defineProperty(out, key, {
        value: expandEnv(child, path ? `${path}.${key}` : key, env, r),
        enumerable: true,
        writable: true,
        configurable: true,
      })
    }
    return out
  }
  return value
}

/** Records on `r.variables` which variables each key path read (a number may come from one; a busy port names it). */
function expandString(text: string, path: string, env: NodeJS.ProcessEnv, r: Reader): string {
  if (!text.includes('${')) return text
  const escaped = text.split('$${')
  return escaped
    .map((part) =>
      part.replace(REFERENCE, (_match, name: string, fallback: string | undefined) => {
        r.variables.set(path, [...(r.variables.get(path) ?? []), name])
        const found = env[name]
        if (found !== undefined && found !== '') return found
        if (fallback !== undefined) return fallback
        r.note(path, `environment variable ${name} is ${found === '' ? 'set but empty' : 'not set'}`)
        return ''
      }),
    )
    .join('${')
}
