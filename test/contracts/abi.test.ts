import t from 'tap';
import { readFileSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import type { Abi, AbiParameter } from 'viem';
import { ARTIFACTS_PATH, loadArtifacts } from '../../contracts/compile.js';
import { escrowAbi, testStablecoinAbi } from '../../plugins/chains/abi.js';

// A canonical one-line form of an ABI item: names, types, indexed flags, outputs, mutability.
function canon(item: Abi[number]): string {
  const params = (ps: readonly AbiParameter[] | undefined) =>
    (ps ?? []).map((p) => `${p.type}${'indexed' in p && p.indexed ? ' indexed' : ''} ${p.name ?? ''}`.trim()).join(',');
  const name = 'name' in item ? item.name : '';
  const outputs = 'outputs' in item ? params(item.outputs) : '';
  const mut = 'stateMutability' in item ? item.stateMutability : '';
  return `${item.type} ${name}(${params('inputs' in item ? item.inputs : [])})->(${outputs}) ${mut}`;
}

t.test('typed ABIs match the solc output item for item', async (t) => {
  const artifacts = await loadArtifacts();
  for (const [name, typed] of [
    ['Escrow', escrowAbi],
    ['TestStablecoin', testStablecoinAbi],
  ] as const) {
    const compiled = artifacts[name].abi.map(canon).sort();
    t.same((typed as Abi).map(canon).sort(), compiled, `${name} ABI`);
    t.match(artifacts[name].bytecode, /^0x(?:[0-9a-f]{2})+$/, `${name} has creation bytecode`);
  }
});

t.test('loadArtifacts recompiles a cache older than the sources, and uses a fresh one as is', async (t) => {
  const shipped = await loadArtifacts();
  const dir = t.testdir({ 'stale.json': '{"stale":true}', 'fresh.json': JSON.stringify({ ...shipped, marker: 1 }) });
  const stale = join(dir, 'stale.json');
  utimesSync(stale, new Date(0), new Date(0)); // older than any .sol file
  const built = await loadArtifacts(stale);
  t.same(built, shipped, 'recompiled: same compiler, same sources -> same artifacts');
  t.same(JSON.parse(readFileSync(stale, 'utf8')), built, 'cache file rewritten with what was returned');
  t.match(await loadArtifacts(join(dir, 'fresh.json')), { marker: 1 }, 'a fresh cache file is not recompiled');
});

t.test('the default cache lives at dist/contracts/artifacts.json', async (t) => {
  t.match(ARTIFACTS_PATH, /dist[\\/]contracts[\\/]artifacts\.json$/);
});
