// Runs `wardline serve <config>` from the TypeScript sources in a separate Node process, for tests that
// need several gateway processes (replicas on one database). TypeScript is compiled on load by swc,
// the compiler jest already uses. Usage: node test/helpers/gateway-process.js <config.yaml>
'use strict'
const { readFileSync } = require('node:fs')
const { join } = require('node:path')
const { transformSync } = require('@swc/core')

require.extensions['.ts'] = (module, filename) => {
  const { code } = transformSync(readFileSync(filename, 'utf8'), {
    filename,
    jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
    module: { type: 'commonjs' },
  })
  module._compile(code, filename)
}

require(join(__dirname, '..', '..', 'src', 'cli', 'serve.ts')).serve(process.argv[2])
