import { HeaderAuthenticator } from '../../src/auth/header-authenticator'
import { configFrom } from '../helpers/harness'
import { type RawHeaders, authenticatorContract } from './authenticator-contract'

/**
 * What HTTP itself cannot carry in a header value: C0 controls other than HTAB and DEL (Node's parser
 * refuses the request), a lone surrogate (no UTF-8 form), and spaces or tabs at either end (every
 * parser trims them, RFC 9110 §5.5, so the authenticator would see another value).
 */
function carriable(value: string): boolean {
  // eslint-disable-next-line no-control-regex -- the control characters HTTP cannot carry are what this matches
  return !/[\u0000-\u0008\u000a-\u001f\u007f]|^[ \t]|[ \t]$/.test(value) && !/[\ud800-\udfff]/u.test(value)
}

authenticatorContract('HeaderAuthenticator', () =>
  Promise.resolve({
    authenticator: new HeaderAuthenticator(),
    config: configFrom({ upstream: 'http://127.0.0.1:1', auth: { mode: 'header' } }).auth,
    credential: (identity, tenant) => {
      if (!carriable(identity) || (tenant !== undefined && !carriable(tenant))) return Promise.resolve(null)
      const headers: Array<[string, string]> = [['X-Wardline-Identity', identity]]
      if (tenant !== undefined) headers.push(['X-Wardline-Tenant', tenant])
      return Promise.resolve(headers)
    },
    twoCallers: (first, second) =>
      Promise.resolve([
        ['X-Wardline-Identity', first.identity],
        ['X-Wardline-Tenant', first.tenant],
        ['X-Wardline-Identity', second.identity],
      ]),
    invalid: (): Promise<Array<{ label: string; headers: RawHeaders }>> =>
      Promise.resolve([
        { label: 'a tenant but no identity', headers: [['X-Wardline-Tenant', 'acme']] },
        { label: 'an empty identity header', headers: [['X-Wardline-Identity', '']] },
        {
          label: 'the identity header twice, same value',
          headers: [
            ['X-Wardline-Identity', 'alice'],
            ['X-Wardline-Identity', 'alice'],
          ],
        },
        {
          label: 'the tenant header twice',
          headers: [
            ['X-Wardline-Identity', 'alice'],
            ['X-Wardline-Tenant', 'acme'],
            ['X-Wardline-Tenant', 'globex'],
          ],
        },
        { label: 'a bearer token instead of the headers', headers: [['Authorization', 'Bearer abc.def.ghi']] },
        { label: 'the identity header spelt with underscores', headers: [['X_Wardline_Identity', 'alice']] },
      ]),
  }),
)
