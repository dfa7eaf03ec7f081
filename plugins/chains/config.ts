/**
 * Config of the four settlement chains (DESIGN.md "Onchain"). Keys are snake_case like the
 * `farebox chains --json` output. No viem here: this schema is embedded in the gateway's config.
 */
import { parseGwei } from 'viem';
import { z } from 'zod';

/** The chain identifiers of the interface (SPEC.md "What the service does", 7). */
export const CHAIN_NAMES = ['chain_a', 'chain_b', 'chain_c', 'chain_d'] as const;

/** One of chain_a..chain_d. */
export type ChainName = (typeof CHAIN_NAMES)[number];

/** A 20-byte hex address. */
export type Address = `0x${string}`;

const address = z
  .string()
  .regex(/^0x[0-9a-fA-F]{40}$/, 'expected a 0x-prefixed 20-byte hex address')
  .transform((s) => s as Address);

/**
 * Confirmations when a chain's config names none: the count long used for Ethereum mainnet, and more than any reorg
 * Ethereum, Base, Arbitrum or Optimism has had since their current consensus. A deeper reorg halts the chain's
 * bookkeeping (chain-watcher.ts): it is never applied twice or dropped silently.
 */
export const DEFAULT_CONFIRMATIONS = 12;

/** Default settlement fee ceiling, gwei. */
export const DEFAULT_MAX_FEE_PER_GAS = '100';

// Refinements run on values the regex refused too: parseGwei must not throw there.
function positiveGwei(v: string): boolean {
  try {
    return parseGwei(v) > 0n;
  } catch {
    return false;
  }
}

/** Config of one chain (strict: a misspelt field, such as a fee ceiling, must not be dropped silently). */
export const chainConfigSchema = z.strictObject({
  chain_id: z.number().int().positive(),
  rpc_url: z.url({ protocol: /^https?$/ }),
  /** The stablecoin the escrow holds (USDC on real networks). */
  stablecoin: address,
  escrow: address,
  /** Name of the env var holding the settler's private key; unset -> the chain is read-only. */
  settler_key_env: z
    .string()
    .regex(/^[A-Z_][A-Z0-9_]*$/)
    .optional(),
  /** Blocks a log/receipt needs (1 = included) before it counts; deploy/farebox.example.json has per-network values. */
  confirmations: z.number().int().min(1).default(DEFAULT_CONFIRMATIONS),
  /**
   * Settlement fee ceiling in gwei, a decimal string ("30", "0.05"): no charge transaction or replacement offers a
   * maxFeePerGas above it. A batch waits (farebox_settlement_fee_capped_total) while the base fee is above it.
   */
  max_fee_per_gas: z
    .string()
    .regex(/^\d{1,9}(\.\d{1,9})?$/, 'gwei as a decimal string with at most 9 decimals')
    .refine((v) => positiveGwei(v), 'must be above 0')
    .default(DEFAULT_MAX_FEE_PER_GAS),
  /** Most blocks asked of eth_getLogs at once: where the adaptive range starts and the most it grows back to. */
  max_log_range: z.number().int().min(1).max(1_000_000).default(2_000),
  /** Block the escrow was deployed in: where event scans start. */
  deploy_block: z.number().int().min(0).default(0),
  /**
   * Most gas one charge batch may have (its gas limit, an upper bound of what it uses: ~4,000 a charge of consecutive
   * call ids, up to ~38,000 each taking a status word and an account of its own). At most 2^24, the per-transaction
   * cap since EIP-7825. A block must have room for it, and while it is unmined the settler key's native balance must
   * cover it at max_fee_per_gas: lower it on a chain of small blocks, or to reserve less.
   */
  max_batch_gas: z.number().int().min(200_000).max(16_777_216).default(16_777_216),
  /** A charge tx not mined after this long is re-sent with the same nonce and a higher fee. */
  replace_after_ms: z.number().int().positive().default(120_000),
  /** How often receipts and the head are polled: about the chain's block time. */
  poll_interval_ms: z.number().int().positive().default(1_000),
});

/** The `chains` section: all four chains. */
export const chainsConfigSchema = z.object({
  chain_a: chainConfigSchema,
  chain_b: chainConfigSchema,
  chain_c: chainConfigSchema,
  chain_d: chainConfigSchema,
});

/** Parsed config of one chain (defaults applied). */
export type ChainConfig = z.output<typeof chainConfigSchema>;
/** Parsed `chains` section. */
export type ChainsConfig = z.output<typeof chainsConfigSchema>;
