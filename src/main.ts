#!/usr/bin/env node
import { Command } from 'commander'
import { loadConfig } from './config/load'
import { configWarnings } from './config/warnings'
import { ConfigError, describeError } from './errors'
import { escapeControls } from './escape'
import { registerAdminCommands } from './cli/admin'
import { registerAuditCommand } from './cli/audit'
import { serve } from './cli/serve'
import { type TokenOptions, parseClaim, tokenCommand } from './cli/token'
import { registerSchemaCommand } from './cli/schema'

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the path is relative to dist/src/main.js, not this file
const { version } = require('../../package.json') as { version: string }

export function buildCli(): Command {
  const program = new Command()
  program
    .name('wardline')
    .description('MCP gateway: identity, budgets, policy and an audit trail in front of an MCP server')
    .version(version)

  program
    .command('serve')
    .description('start the gateway')
    .option('-c, --config <file>', 'configuration file', 'wardline.yaml')
    .action(async (opts: { config: string }) => {
      await serve(opts.config)
    })

  program
    .command('check-config')
    .description('validate a configuration file without starting anything (exit 0 when valid, 1 otherwise)')
    .option('-c, --config <file>', 'configuration file', 'wardline.yaml')
    .action((opts: { config: string }) => {
      try {
        const config = loadConfig(opts.config)
        process.stdout.write(`${opts.config}: ok\n`)
        // Valid, but most likely not what was meant: said on stderr, exit status still 0.
        for (const warning of configWarnings(config)) process.stderr.write(`${opts.config}: warning: ${warning}\n`)
      } catch (err) {
        if (err instanceof ConfigError) {
          process.stderr.write(`${opts.config}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}\n`)
          // A problem quotes the key as written: a key holding escape sequences must not drive the terminal.
          for (const p of err.problems) process.stderr.write(`  ${escapeControls(p)}\n`)
        } else {
          process.stderr.write(`${opts.config}: ${describeError(err)}\n`)
        }
        process.exitCode = 1
      }
    })
  program
    .command('token')
    .description(
      'print a token signed with the configured auth.jwt.secret (for trying the gateway; HS configs only); its jti (for wardline revoke --jti) goes to stderr',
    )
    .option('-c, --config <file>', 'configuration file', 'wardline.yaml')
    .requiredOption('--sub <identity>', 'the identity (the auth.jwt.identity_claim claim)')
    .option('--tenant <tenant>', 'the tenant (the auth.jwt.tenant_claim claim); omitted means tenant "default"')
    .option('--ttl <duration>', 'lifetime: 90s, 30m, 1h, 7d', '1h')
    .option('--json', 'print {token, jti, identity, tenant, issued_at, expires_at} as JSON instead of the bare token')
    .option(
      '--claim <key=value>',
      'an extra claim (repeatable; JSON values are parsed)',
      (v: string, acc: Record<string, unknown>) => parseClaim(v, acc),
      {},
    )
    .action(async (opts: TokenOptions) => {
      await tokenCommand(opts)
    })
  registerAuditCommand(program)
  registerSchemaCommand(program)
  registerAdminCommands(program)
  return program
}

if (require.main === module) {
  buildCli()
    .parseAsync(process.argv)
    .catch((err) => {
      process.stderr.write(`wardline: ${describeError(err)}\n`)
      process.exit(1)
    })
}
