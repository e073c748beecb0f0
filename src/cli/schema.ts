import type { Command } from 'commander'
import { configSchema, policySchema } from '../config/schema'

/** The schema as the checked-in wardline.schema.json holds it: two-space JSON and a final newline. */
export function schemaText(which: 'config' | 'policy' = 'config'): string {
  return `${JSON.stringify(which === 'policy' ? policySchema() : configSchema(), null, 2)}\n`
}

/**
 * `wardline schema [--policy]`: prints the JSON Schema of wardline.yaml (or of a policy file) on
 * stdout, for editors (the `# yaml-language-server: $schema=…` line) and CI validators. It is recorded
 * from the readers check-config runs (config/schema.ts), so it says what check-config accepts.
 */
export function registerSchemaCommand(program: Command): void {
  program
    .command('schema')
    .description('print the JSON Schema (draft-07) of wardline.yaml, for editors and validators')
    .option('--policy', 'the schema of a policy file (policy_file:) instead')
    .action((opts: { policy?: boolean }) => {
      process.stdout.write(schemaText(opts.policy === true ? 'policy' : 'config'))
    })
}
