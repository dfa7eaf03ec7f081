/**
 * Transactions the browser wallet sends to the escrow, written by the server so the page's script only relays them:
 * a deposit by EIP-3009 authorization (the wallet signs ReceiveWithAuthorization to the escrow, then sends one
 * transaction, depositWithAuthorization: no approve), the approve-and-deposit pair for a token without EIP-3009,
 * and the withdrawal request, withdrawal and cancellation.
 */
import {
  encodeFunctionData,
  isHex,
  keccak256,
  parseSignature,
  recoverTypedDataAddress,
  slice,
  toBytes,
  type Hex,
} from 'viem';
import { escrowAbi, RECEIVE_WITH_AUTHORIZATION_TYPES, testStablecoinAbi } from '../chains/abi.js';
import type { Address } from '../chains/config.js';
import { DashboardError } from './errors.js';

type AbiItem = (typeof escrowAbi)[number] | (typeof testStablecoinAbi)[number];

/**
 * The escrow's and the stablecoin's custom errors by selector, for the page's script to name a revert (it carries no
 * ABI decoder). Both contracts' InsufficientBalance and ZeroAddress share a selector, hence a name.
 */
export const REVERT_ERRORS: Readonly<Record<Hex, string>> = Object.fromEntries(
  [...escrowAbi, ...testStablecoinAbi]
    .filter((item): item is Extract<AbiItem, { type: 'error' }> => item.type === 'error')
    .map((e) => [slice(keccak256(toBytes(`${e.name}(${e.inputs.map((i) => i.type).join(',')})`)), 0, 4), e.name]),
);

/** A transaction for the wallet to send: no value, gas left to the wallet. */
export interface TxRequest {
  to: Address;
  data: Hex;
}

/** The fields of a ReceiveWithAuthorization. */
export interface Authorization {
  from: Address;
  to: Address;
  value: bigint;
  validAfter: bigint;
  validBefore: bigint;
  nonce: Hex;
}

/** How long a deposit authorization stays valid: time to confirm it and send the transaction. */
export const AUTHORIZATION_TTL_S = 3_600n;

/** The EIP-712 domain of the stablecoin on one chain. */
export interface TokenDomain {
  name: string;
  version: string;
  chainId: number;
  verifyingContract: Address;
}

/** Typed data for eth_signTypedData_v4 (JSON: integers as decimal strings), EIP712Domain included as wallets expect. */
export function authorizationTypedData(domain: TokenDomain, a: Authorization) {
  return {
    types: {
      EIP712Domain: [
        { name: 'name', type: 'string' },
        { name: 'version', type: 'string' },
        { name: 'chainId', type: 'uint256' },
        { name: 'verifyingContract', type: 'address' },
      ],
      ...RECEIVE_WITH_AUTHORIZATION_TYPES,
    },
    primaryType: 'ReceiveWithAuthorization' as const,
    domain,
    message: {
      from: a.from,
      to: a.to,
      value: a.value.toString(),
      validAfter: a.validAfter.toString(),
      validBefore: a.validBefore.toString(),
      nonce: a.nonce,
    },
  };
}

const UINT = /^\d{1,78}$/;
const NONCE32 = /^0x[0-9a-fA-F]{64}$/;

/**
 * The authorization the browser sends back, checked against what this deposit must be: from the account, to the
 * escrow, for the amount, valid now and for at most AUTHORIZATION_TTL_S more.
 */
export function readAuthorization(
  input: unknown,
  want: { from: Address; to: Address; value: bigint },
  nowS: bigint,
): Authorization {
  const bad = (why: string) =>
    new DashboardError('invalid_input', { message: `The deposit authorization ${why}; start the deposit again.` });
  if (!input || typeof input !== 'object') throw bad('is missing');
  const m = input as Record<string, unknown>;
  for (const f of ['value', 'validAfter', 'validBefore'] as const)
    if (typeof m[f] !== 'string' || !UINT.test(m[f] as string)) throw bad(`has no valid ${f}`);
  if (typeof m.nonce !== 'string' || !NONCE32.test(m.nonce)) throw bad('has no valid nonce');
  if (typeof m.from !== 'string' || m.from.toLowerCase() !== want.from.toLowerCase())
    throw bad('is not from your account');
  if (typeof m.to !== 'string' || m.to.toLowerCase() !== want.to.toLowerCase())
    throw bad("is not to this chain's escrow");
  const a: Authorization = {
    from: want.from,
    to: want.to,
    value: BigInt(m.value as string),
    validAfter: BigInt(m.validAfter as string),
    validBefore: BigInt(m.validBefore as string),
    nonce: m.nonce as Hex,
  };
  if (a.value !== want.value) throw bad('is for another amount');
  if (a.validAfter > nowS || a.validBefore <= nowS || a.validBefore > nowS + AUTHORIZATION_TTL_S)
    throw bad('is outside its validity window');
  return a;
}

/** Whether `signature` is the account's EIP-712 signature of the authorization. */
export async function signedBy(domain: TokenDomain, a: Authorization, signature: unknown): Promise<boolean> {
  if (typeof signature !== 'string' || !isHex(signature) || signature.length !== 132) return false;
  try {
    const signer = await recoverTypedDataAddress({
      domain,
      types: RECEIVE_WITH_AUTHORIZATION_TYPES,
      primaryType: 'ReceiveWithAuthorization',
      message: a,
      signature,
    });
    return signer.toLowerCase() === a.from.toLowerCase();
  } catch {
    return false;
  }
}

/** The escrow's depositWithAuthorization for a signed authorization. */
export function depositWithAuthorizationTx(escrow: Address, a: Authorization, signature: Hex): TxRequest {
  const { r, s, v, yParity } = parseSignature(signature);
  const vv = Number(v ?? BigInt(yParity + 27));
  return {
    to: escrow,
    data: encodeFunctionData({
      abi: escrowAbi,
      functionName: 'depositWithAuthorization',
      args: [a.from, a.value, a.validAfter, a.validBefore, a.nonce, vv, r, s],
    }),
  };
}

/** approve(escrow, amount) on the stablecoin: the first of two transactions for a token without EIP-3009. */
export function approveTx(stablecoin: Address, escrow: Address, amount: bigint): TxRequest {
  return {
    to: stablecoin,
    data: encodeFunctionData({ abi: testStablecoinAbi, functionName: 'approve', args: [escrow, amount] }),
  };
}

/** deposit(amount) on the escrow, after an approve. */
export function depositTx(escrow: Address, amount: bigint): TxRequest {
  return { to: escrow, data: encodeFunctionData({ abi: escrowAbi, functionName: 'deposit', args: [amount] }) };
}

/** requestWithdrawal(amount): starts (or restarts) the escrow's timelock. */
export function requestWithdrawalTx(escrow: Address, amount: bigint): TxRequest {
  return {
    to: escrow,
    data: encodeFunctionData({ abi: escrowAbi, functionName: 'requestWithdrawal', args: [amount] }),
  };
}

/** withdraw(): pays the request out once its timelock has passed. */
export function withdrawTx(escrow: Address): TxRequest {
  return { to: escrow, data: encodeFunctionData({ abi: escrowAbi, functionName: 'withdraw' }) };
}

/** cancelWithdrawal(). */
export function cancelWithdrawalTx(escrow: Address): TxRequest {
  return { to: escrow, data: encodeFunctionData({ abi: escrowAbi, functionName: 'cancelWithdrawal' }) };
}
