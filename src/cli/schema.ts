import { readFileSync, writeFileSync } from 'node:fs'
import type { Command } from 'commander'
import { keyTable, withKeyTable } from '../config/key-table'
import { configSchema, policySchema } from '../config/schema'

/** The schema as the checked-in wardline.schema.json holds it: two-space JSON and a final newline. */
export function schemaText(which: 'config' | 'policy' = 'config'): string {
  return `${JSON.stringify(which === 'policy' ? policySchema() : configSchema(), null, 2)}\n`
}

/**
 * `wardline schema [--policy | --keys | --update-docs FILE]`: prints the JSON Schema of wardline.yaml
 * (or of a policy file) on stdout, for editors (the `# yaml-language-server: $schema=…` line) and CI
 * validators; or the table of every key as markdown, or rewrites that table between its markers in a
 * page (docs/configuration.md). All come from the declarative schema check-config reads by
 * (config/spec.ts), so they say what check-config accepts.
 */
export function registerSchemaCommand(program: Command): void {
  program
    .command('schema')
    .description('print the JSON Schema (draft-07) of wardline.yaml, for editors and validators')
    .option('--policy', 'the schema of a policy file (policy_file:) instead')
    .option('--keys', 'the table of every key (markdown) instead')
    .option('--update-docs <file>', 'rewrite the key table between its markers in this markdown file')
    .action((opts: { policy?: boolean; keys?: boolean; updateDocs?: string }) => {
      if (opts.updateDocs !== undefined) {
        writeFileSync(opts.updateDocs, withKeyTable(readFileSync(opts.updateDocs, 'utf8')))
        return
      }
      if (opts.keys === true) {
        process.stdout.write(`${keyTable()}\n`)
        return
      }
      process.stdout.write(schemaText(opts.policy === true ? 'policy' : 'config'))
    })
}
