// Node 22 added fs.globSync, which @modelcontextprotocol/conformance imports by name; Node 20 (the
// runtime here) lacks it, and a builtin's ESM exports cannot be extended after startup. Loaded with
// `node --import ./test/conformance/node20-fs-glob.mjs`, this hook answers the suite's `fs` import
// with node:fs plus a globSync covering the one form the suite uses (`**/<file name>`, in
// `tier-check`); anything else throws. Nothing else is redirected. On Node 22+ it does nothing.
import * as fs from 'node:fs'
import { register } from 'node:module'

const SHIM = 'wardline-conformance:fs'

if (typeof fs.globSync !== 'function') {
  register(
    `data:text/javascript,${encodeURIComponent(`
      export async function resolve(specifier, context, next) {
        if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.includes('/@modelcontextprotocol/conformance/')) {
          return { url: '${SHIM}', shortCircuit: true }
        }
        return next(specifier, context)
      }
      export async function load(url, context, next) {
        if (url !== '${SHIM}') return next(url, context)
        const source = \`
          import fs from 'node:fs'
          import path from 'node:path'
          export * from 'node:fs'
          export default fs
          export function globSync(pattern, options = {}) {
            const match = /^\\\\*\\\\*\\\\/([^*?[\\\\]{}/]+)$/.exec(String(pattern))
            if (match === null) throw new Error('node20-fs-glob: only **/<name> is supported, not ' + pattern)
            return fs.readdirSync(options.cwd ?? process.cwd(), { recursive: true }).map(String).filter((e) => path.basename(e) === match[1])
          }\`
        return { format: 'module', source, shortCircuit: true }
      }
    `)}`,
  )
}
