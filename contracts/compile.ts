/**
 * Compiles contracts/*.sol with solc-js and caches the result in dist/contracts/artifacts.json.
 * Run as a script (`node --import tsx contracts/compile.ts`) or call loadArtifacts().
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Abi } from 'viem';

/** ABI and creation bytecode of one contract. */
export interface ContractArtifact {
  abi: Abi;
  bytecode: `0x${string}`;
}

/** The compiled contracts of the project. */
export interface Artifacts {
  TestStablecoin: ContractArtifact;
  Escrow: ContractArtifact;
}

const CONTRACTS = ['TestStablecoin', 'Escrow'] as const;
// cancun: the newest EVM version all target networks (Ethereum, Base, Arbitrum, Optimism, Polygon) run.
const EVM_VERSION = 'cancun';

// Walks up to package.json so this works both from contracts/ (tsx) and dist/contracts/ (built).
function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('contracts/compile: package.json not found above ' + import.meta.url);
    dir = parent;
  }
  return dir;
}

const root = projectRoot();
const sourcesDir = join(root, 'contracts');
/** Where the compiled artifacts are cached. */
export const ARTIFACTS_PATH = join(root, 'dist', 'contracts', 'artifacts.json');

function solFiles(): string[] {
  if (!existsSync(sourcesDir)) return [];
  return readdirSync(sourcesDir)
    .filter((f) => f.endsWith('.sol'))
    .sort();
}

interface SolcOutput {
  errors?: { severity: string; formattedMessage: string }[];
  contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
}

/** Compiles the .sol sources with solc-js (0.8.30) and returns the artifacts, without caching. */
export async function compileContracts(): Promise<Artifacts> {
  // solc is a devDependency: imported lazily so a built gateway with cached artifacts never loads it.
  const { default: solc } = await import('solc');
  const sources: Record<string, { content: string }> = {};
  for (const f of solFiles()) sources[f] = { content: readFileSync(join(sourcesDir, f), 'utf8') };
  const input = {
    language: 'Solidity',
    sources,
    settings: {
      evmVersion: EVM_VERSION,
      optimizer: { enabled: true, runs: 10_000 },
      outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
    },
  };
  const out = JSON.parse(solc.compile(JSON.stringify(input))) as SolcOutput;
  const errors = (out.errors ?? []).filter((e) => e.severity === 'error');
  if (errors.length) throw new Error('solc failed:\n' + errors.map((e) => e.formattedMessage).join('\n'));
  const result = {} as Artifacts;
  for (const name of CONTRACTS) {
    const c = out.contracts[`${name}.sol`]?.[name];
    if (!c) throw new Error(`solc output lacks ${name}`);
    result[name] = { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}` };
  }
  return result;
}

function isFresh(cachePath: string): boolean {
  if (!existsSync(cachePath)) return false;
  const built = statSync(cachePath).mtimeMs;
  // No sources (an installed package): the shipped artifacts are the truth.
  return solFiles().every((f) => statSync(join(sourcesDir, f)).mtimeMs <= built);
}

const cached = new Map<string, Artifacts>();

/**
 * Returns the compiled artifacts, compiling (and caching to `cachePath`) when that file is
 * missing or older than the sources.
 */
export async function loadArtifacts(cachePath: string = ARTIFACTS_PATH): Promise<Artifacts> {
  const fresh = isFresh(cachePath);
  const inMemory = cached.get(cachePath);
  if (inMemory && fresh) return inMemory;
  let artifacts: Artifacts;
  if (fresh) {
    artifacts = JSON.parse(readFileSync(cachePath, 'utf8')) as Artifacts;
  } else {
    artifacts = await compileContracts();
    mkdirSync(dirname(cachePath), { recursive: true });
    // Write-then-rename: parallel test files may compile at once; readers never see half a file.
    const tmp = `${cachePath}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(artifacts, null, 1));
    renameSync(tmp, cachePath);
  }
  cached.set(cachePath, artifacts);
  return artifacts;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const t0 = performance.now();
  const a = await compileContracts();
  mkdirSync(dirname(ARTIFACTS_PATH), { recursive: true });
  writeFileSync(ARTIFACTS_PATH, JSON.stringify(a, null, 1));
  const sizes = CONTRACTS.map((n) => `${n} ${(a[n].bytecode.length - 2) / 2} B`).join(', ');
  console.log(`compiled ${sizes} in ${Math.round(performance.now() - t0)} ms -> ${ARTIFACTS_PATH}`);
}
