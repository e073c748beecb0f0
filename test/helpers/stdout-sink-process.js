// A JsonlAuditSink on this process's stdout, driven over IPC by a test (test/audit/sink-contract.ts):
// the parent starts it with stdout redirected to a file, as `wardline serve > audit.jsonl` would, and
// reads what the sink wrote from that file. TypeScript is compiled on load by swc (as
// test/helpers/cli.ts does for the CLI). Messages: { id, op: 'write' | 'reopen' | 'close', entries? }; each is answered
// with { id, ok, message? } once the sink's call settled.
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

const { JsonlAuditSink } = require(join(__dirname, '..', '..', 'src', 'audit', 'jsonl-sink.ts'))

const opened = JsonlAuditSink.open('stdout')

process.on('message', (m) => {
  opened
    .then(async (sink) => {
      if (m.op === 'write') await sink.write(m.entries)
      else if (m.op === 'reopen') sink.reopen()
      else if (m.op === 'close') await sink.close()
      else throw new Error(`unknown op ${m.op}`)
    })
    .then(
      () => process.send({ id: m.id, ok: true }),
      (err) => process.send({ id: m.id, ok: false, message: String((err && err.message) || err) }),
    )
})
process.on('disconnect', () => process.exit(0))
opened.then(
  (sink) => process.send({ ready: true, name: sink.name }),
  (err) => process.send({ ready: false, message: String(err) }),
)
