const { availableParallelism } = require('node:os')

/** @type {import('jest').Config} */
module.exports = {
  // Jest's default (cores - 1) is one worker on a 2-core machine: the suite then takes ~7.5 min
  // instead of ~4. Most test time is waiting on sockets, child processes and Postgres, not CPU.
  maxWorkers: Math.max(2, availableParallelism() - 1),
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  // jose 6 ships only ESM; let swc turn it into CommonJS like our own code
  transformIgnorePatterns: ['/node_modules/(?!jose/)'],
  testTimeout: 30000,
  // One Postgres server for the run (env URL, local 5432, or a throwaway embedded one); each test
  // file then creates its own database with test/helpers/postgres.ts.
  globalSetup: '<rootDir>/test/helpers/postgres-global-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/postgres-global-teardown.ts',
}
