/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  // jose 6 ships only ESM; let swc turn it into CommonJS like our own code
  transformIgnorePatterns: ['/node_modules/(?!jose/)'],
  testTimeout: 30000,
}
