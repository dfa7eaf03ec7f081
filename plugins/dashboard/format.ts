/**
 * How the dashboard writes times, addresses and amounts: UTC times (the server knows no one's time zone), USD
 * amounts as the CLI prints them (rates: pricing/publish.ts).
 */
import { formatUsd } from '../../pricing/index.js';

/** A time in ms as `2026-11-25 10:22 UTC`. */
export function formatTime(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}

/** A time in ms as `2026-11-25 10:22:03 UTC` (usage rows: calls a second apart stay apart). */
export function formatTimeSeconds(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

/** `0x1234…abcd`: enough of an address or hash to recognise it. */
export function shortHex(hex: string): string {
  return hex.length > 14 ? `${hex.slice(0, 6)}…${hex.slice(-4)}` : hex;
}

/** Atomic units as a USD amount with 6 decimals, as `farebox balance` prints them. */
export function usd(atomic: bigint): string {
  return formatUsd(atomic);
}

/** A duration in seconds in words: `1 hour`, `2 days`, `90 seconds`. */
export function formatDuration(seconds: bigint): string {
  const s = Number(seconds);
  const unit = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  if (s % 86_400 === 0 && s > 0) return unit(s / 86_400, 'day');
  if (s % 3_600 === 0 && s > 0) return unit(s / 3_600, 'hour');
  if (s % 60 === 0 && s > 0) return unit(s / 60, 'minute');
  return unit(s, 'second');
}
