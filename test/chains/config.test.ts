import t from 'tap';
import { readFileSync } from 'node:fs';
import {
  CHAIN_NAMES,
  chainConfigSchema,
  chainsConfigSchema,
  DEFAULT_CONFIRMATIONS,
} from '../../plugins/chains/config.js';

const example = JSON.parse(readFileSync(new URL('../../deploy/farebox.example.json', import.meta.url), 'utf8'));

t.test('deploy/farebox.example.json chains parse: four real networks with native USDC', async (t) => {
  const chains = chainsConfigSchema.parse(example.chains);
  t.same(Object.keys(chains).sort(), [...CHAIN_NAMES]);
  t.same(
    CHAIN_NAMES.map((n) => chains[n].chain_id),
    [1, 8453, 42161, 10],
  );
  t.equal(chains.chain_b.stablecoin, '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913');
  t.equal(chains.chain_a.settler_key_env, 'FAREBOX_SETTLER_KEY_CHAIN_A');
  for (const n of CHAIN_NAMES) {
    t.ok(
      chains[n].confirmations > DEFAULT_CONFIRMATIONS / 2,
      `${n}: confirmations set for its network (${chains[n].confirmations})`,
    );
    t.match(chains[n].max_fee_per_gas, /^\d/, `${n}: a fee ceiling for its network`);
  }
});

t.test('defaults are applied to optional fields', async (t) => {
  const c = chainConfigSchema.parse({
    chain_id: 5,
    rpc_url: 'http://127.0.0.1:8545',
    stablecoin: '0x' + '11'.repeat(20),
    escrow: '0x' + '22'.repeat(20),
  });
  t.match(c, {
    confirmations: 12,
    max_fee_per_gas: '100',
    max_log_range: 2_000,
    deploy_block: 0,
    replace_after_ms: 120_000,
    poll_interval_ms: 1_000,
  });
  t.equal(c.settler_key_env, undefined, 'no key env -> read-only chain');
});

t.test('bad chain configs are refused', async (t) => {
  const good = example.chains.chain_a;
  for (const [what, patch] of [
    ['short address', { escrow: '0x1234' }],
    ['chain id 0', { chain_id: 0 }],
    ['ftp rpc url', { rpc_url: 'ftp://example.org' }],
    ['0 confirmations', { confirmations: 0 }],
    ['fee ceiling as a number', { max_fee_per_gas: 30 }],
    ['fee ceiling of 0', { max_fee_per_gas: '0' }],
    ['fee ceiling with a unit', { max_fee_per_gas: '30 gwei' }],
    ['fee ceiling finer than a wei', { max_fee_per_gas: '0.0000000001' }],
    ['log range of 0', { max_log_range: 0 }],
    ['a misspelt field', { max_fee_per_gas_gwei: '30' }],
    ['lower-case env name', { settler_key_env: 'my_key' }],
  ] as const) {
    t.notOk(chainConfigSchema.safeParse({ ...good, ...patch }).success, what);
  }
  const { chain_d: _dropped, ...three } = example.chains;
  t.notOk(chainsConfigSchema.safeParse(three).success, 'all four chains are required');
});
