/**
 * Sign-In with Ethereum (EIP-4361) for the dashboard. The server writes the whole message (domain and scheme of the
 * dashboard's origin, the wallet's chain if the gateway bills on it, a fresh nonce, five minutes of validity) and
 * keeps it under its nonce, bound to the browser that asked by a cookie. The signed message must come back from
 * that browser, unchanged, once: presenting it deletes it, whatever the outcome.
 */
import { hash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { getAddress, isAddress, isAddressEqual, recoverMessageAddress, type Hex } from 'viem';
import { createSiweMessage, parseSiweMessage, validateSiweMessage } from 'viem/siwe';
import { keys } from '../store/keys.js';
import { DashboardError } from './errors.js';

/** Name of the cookie that binds an issued message to the browser that asked for it. */
export const SIGN_IN_COOKIE = 'farebox_signin';
/** How long an issued message can be signed and presented. */
export const SIGN_IN_TTL_MS = 5 * 60_000;
/** The statement the wallet shows above the message's fields. */
export const SIGN_IN_STATEMENT = 'Sign in to the farebox dashboard. Signing sends no transaction and costs nothing.';

interface Issued {
  message: string;
  origin: string;
  /** SHA-256 of the binding cookie's token. */
  binding: string;
}

const NONCE = /^[0-9a-f]{32}$/;

function digest(s: string): string {
  return hash('sha256', s, 'hex');
}

/** What issueSignIn needs: the wallet's address and chain, the origin the page was served from, the chains billed on. */
export interface IssueInput {
  address: unknown;
  chainId: unknown;
  origin: string;
  /** URI the message names: the dashboard's address. */
  uri: string;
  chainIds: readonly number[];
  now?: number;
}

/** Write and store a sign-in message; returns it and the binding cookie's token. */
export async function issueSignIn(redis: Redis, input: IssueInput): Promise<{ message: string; bindingToken: string }> {
  const { address, chainId, origin, uri, chainIds, now = Date.now() } = input;
  if (typeof address !== 'string' || !isAddress(address, { strict: false })) {
    throw new DashboardError('invalid_input', { message: 'The wallet gave no valid address.' });
  }
  if (typeof chainId !== 'number' || !Number.isSafeInteger(chainId))
    throw new DashboardError('invalid_input', { message: 'The wallet gave no valid chain id.' });
  if (!chainIds.includes(chainId)) {
    throw new DashboardError('wrong_chain', {
      message: `Your wallet is on chain id ${chainId}; sign in on one of this gateway's chains (chain ids ${chainIds.join(', ')}).`,
    });
  }
  const nonce = randomBytes(16).toString('hex');
  const url = new URL(origin);
  const message = createSiweMessage({
    address: getAddress(address),
    chainId,
    domain: url.host,
    scheme: url.protocol.slice(0, -1),
    uri,
    version: '1',
    nonce,
    statement: SIGN_IN_STATEMENT,
    issuedAt: new Date(now),
    expirationTime: new Date(now + SIGN_IN_TTL_MS),
  });
  const bindingToken = randomBytes(32).toString('base64url');
  const issued: Issued = { message, origin, binding: digest(bindingToken) };
  await redis.set(keys.dashNonce(nonce), JSON.stringify(issued), 'PX', SIGN_IN_TTL_MS);
  return { message, bindingToken };
}

/** Checks a smart-contract wallet's signature on a chain (ERC-1271, or ERC-6492 before deployment). */
export type ContractSignatureCheck = (
  chainId: number,
  address: Hex,
  message: string,
  signature: Hex,
) => Promise<boolean>;

/** What verifySignIn needs: the presented message and signature, the browser's binding token and request origin. */
export interface VerifyInput {
  message: unknown;
  signature: unknown;
  bindingToken: string | undefined;
  origin: string;
  chainIds: readonly number[];
  checkContract: ContractSignatureCheck;
  now?: number;
}

/** Verify a signed sign-in message; returns the account (lowercase address) or throws a DashboardError. */
export async function verifySignIn(redis: Redis, input: VerifyInput): Promise<string> {
  const { message, signature, bindingToken, origin, chainIds, checkContract, now = Date.now() } = input;
  if (typeof message !== 'string' || message.length > 4_000)
    throw new DashboardError('invalid_input', { message: 'No sign-in message was sent.' });
  // ERC-6492 signatures carry a factory call: longer than an EOA's 65 bytes, but bounded here all the same.
  if (typeof signature !== 'string' || !/^0x[0-9a-fA-F]+$/.test(signature) || signature.length > 20_000) {
    throw new DashboardError('invalid_input', { message: 'No valid signature was sent.' });
  }
  const parsed = parseSiweMessage(message);
  if (!parsed.nonce || !NONCE.test(parsed.nonce)) throw new DashboardError('sign_in_unknown');
  // Taken once: a second presentation of the same message, right or wrong, finds nothing.
  const stored = await redis.getdel(keys.dashNonce(parsed.nonce));
  if (!stored) throw new DashboardError('sign_in_unknown');
  const issued = JSON.parse(stored) as Issued;
  if (!bindingToken || digest(bindingToken) !== issued.binding || origin !== issued.origin)
    throw new DashboardError('sign_in_unknown');
  if (message !== issued.message) throw new DashboardError('sign_in_altered');
  // The text is the one issued; EIP-4361 still asks for its fields to be checked, and time has passed since.
  const host = new URL(origin).host;
  const valid = validateSiweMessage({
    message: parsed,
    domain: host,
    nonce: parsed.nonce,
    scheme: new URL(origin).protocol.slice(0, -1),
    time: new Date(now),
  });
  if (!valid || parsed.chainId === undefined || !chainIds.includes(parsed.chainId))
    throw new DashboardError('sign_in_unknown');
  const address = parsed.address as Hex;
  let ok = false;
  try {
    ok = isAddressEqual(await recoverMessageAddress({ message, signature: signature as Hex }), address);
  } catch {
    ok = false;
  }
  if (!ok) ok = await checkContract(parsed.chainId, address, message, signature as Hex);
  if (!ok) throw new DashboardError('bad_signature');
  return address.toLowerCase();
}
