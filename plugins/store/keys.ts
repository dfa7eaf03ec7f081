/**
 * Every Redis key of the project, in one place. Names are under the deployment's prefix (config `redis.prefix`),
 * which the connection adds (ioredis keyPrefix); scripts that build keys from event fields use `luaKeys`, the same
 * names as Lua expressions over a `prefix` variable.
 *
 * Accounts (plugins/accounts/)
 *   account:<addr>           hash    status, default_chain, created_at
 *   accounts                 set     every account address
 *   apikey:<sha256>          hash    id, account, name, created_at, revoked_at, last_used_at, models (allow-list,
 *                                    comma-separated), expires_at (ms)
 *   apikey-id:<id>           string  sha256 of the key with that id
 *   account-keys:<addr>      set     key ids of the account
 *   key-spend:<id>           hash    one key's money (key-limits.ts): l spend limit, r reset, w window start (ms),
 *                                    s spent in the window, h held by running calls, t spent in all; the hold and
 *                                    debit scripts move it (billing/wallets.ts)
 *   invalidate               channel key revocations and status changes (a channel, not a key: prefixed by hand)
 * Dashboard (plugins/dashboard/)
 *   dash-nonce:<nonce>       string  an issued sign-in message (JSON), single use, deleted when presented
 *   dash-session:<sha256>    hash    account, csrf, created_at, expires_at of a signed-in browser (id stored hashed)
 *   dash-sessions:<addr>     set     session hashes of the account (sign out everywhere)
 *   dash-rate:<ip>           string  sign-in messages issued to one client IP in the current minute
 * Money (plugins/billing/wallets.ts has the scripts that move it)
 *   wallet:<addr>:<chain>    hash    synced, locked, pending, held
 *   wallets:<chain>          set     accounts with a wallet on the chain
 *   call:<callId>            hash    the call's record from hold to charge (call-records.ts), a listpack: every name
 *                                    and value within Redis's default 64 bytes. t time (ms), a account (until
 *                                    settled), k key id, m model, c chain, h held, o owner (while held, or a job's),
 *                                    e expiry (while held), p price, s status, x tx (its 64 hex digits), r request id
 *                                    (only when the call id does not spell it), in out cr cw5 cw1 img vs (usage
 *                                    counts above 0), z image size class, cap late rel (capped, debited after
 *                                    release, release reason), ks (the key's spend counts the hold; until debited),
 *                                    rb blk (rebuilt from the escrow's event after Redis lost the call's writes, and
 *                                    that event's block: apply-events.ts). A record written before this layout has
 *                                    long names and its usage as JSON.
 *   holds                    zset    request id by hold expiry (ms)
 *   owner-holds:<owner>      set     request ids held by one owner (a gateway instance or a job)
 *   instances                zset    gateway instance by last heartbeat (ms)
 *   debits:<chain>           stream  debits to charge onchain
 *   usage-idx:<addr>         zset    request id by call time
 * Rate limits (plugins/billing/rate-limit.ts)
 *   rl:{<addr>}:<family>:k:<keyId>:r|t, rl:{<addr>}:<family>:a:r|t   one bucket per limit
 *   rl:{<addr>}:video-polls:k:<keyId>      one key's bucket of video polls and downloads
 * Video jobs (plugins/jobs/)
 *   video:<id>               hash    one job (video-store.ts): account, key_id, model, family, seconds, size, prompt,
 *                                    chain, request_id and call_id of its hold, held, price, provider, upstream_model,
 *                                    upstream_id, status, progress, created_at, deadline, completed_at, error_code,
 *                                    error_message, content_url, expires_at, polls, hold_closed, pending (until its
 *                                    submit's answer went out); kept videos.record_days after it ends (longer while its
 *                                    MP4 is downloadable)
 *   videos-open              zset    job id by its next upstream poll (ms): jobs not yet ended, or whose hold is not yet closed
 *   video-poller-lease       string  the instance polling upstream jobs (video-poller.ts; a lease, lease.ts)
 * Chains (plugins/settlement/)
 *   cursor:<chain>           string  last applied escrow event, "block:logIndex"
 *   scanned:<chain>          string  last block scanned
 *   scanned-hash:<chain>     string  hash of that block, checked on the next scan (a reorg below it halts the chain)
 *   scan-anchors:<chain>     list    "block:hash" of the last 256 scanned blocks, newest first: where a resume
 *                                    after a reorg finds the last block both branches share
 *   chain-halt:<chain>       string  JSON: why the watcher stopped applying the chain's events (a deep reorg),
 *                                    until an operator resumes it (chain-watcher.ts, resumeChain)
 *   escrow-cap:<chain>       string  the escrow's maxCharge, as the watcher last read it
 *   escrow-delay:<chain>     string  the escrow's withdrawalDelay (seconds), as the watcher last read it: admission
 *                                    stops new holds on a chain whose debits wait near it (admission.ts)
 *   chain-anomalies:<chain>  list    JSON per escrow event the watcher could not apply (apply-events.ts); kept
 *   watcher-lease:<chain>    string  the instance watching the chain (a lease, lease.ts)
 * Images (plugins/store/image-store.ts)
 *   image:<id>               hash    a url image: type, data (the bytes), expires (ms); expires with it
 *   images                   zset    "<id>:<bytes>" by expiry (ms): images and reservations, what the budget counts
 *   images-bytes             string  bytes of the images and reservations in `images`
 * Embedded default (plugins/serve.ts)
 *   dev-chains               string  the dev chains' config, for the CLI
 *   demo:account             string  the demo account's address
 *   embedded-default         string  the mark of a prefix the embedded default made (its name): it resets only those
 */

/** Key names, relative to the connection's prefix. */
export const keys = {
  account: (address: string) => `account:${address}`,
  accounts: 'accounts',
  apiKey: (hash: string) => `apikey:${hash}`,
  apiKeyId: (id: string) => `apikey-id:${id}`,
  accountKeys: (address: string) => `account-keys:${address}`,
  keySpend: (id: string) => `key-spend:${id}`,
  /** Not a key: the pub/sub channel of invalidations (ioredis prefixes keys, not channels). */
  invalidateChannel: (prefix: string) => `${prefix}invalidate`,

  dashNonce: (nonce: string) => `dash-nonce:${nonce}`,
  dashSession: (hash: string) => `dash-session:${hash}`,
  dashSessions: (address: string) => `dash-sessions:${address}`,
  dashRate: (ip: string) => `dash-rate:${ip}`,

  wallet: (account: string, chain: string) => `wallet:${account}:${chain}`,
  wallets: (chain: string) => `wallets:${chain}`,
  call: (callId: string) => `call:${callId}`,
  holds: 'holds',
  ownerHolds: (owner: string) => `owner-holds:${owner}`,
  instances: 'instances',
  debits: (chain: string) => `debits:${chain}`,
  usageIndex: (account: string) => `usage-idx:${account}`,

  /** Prefix of one account's rate-limit buckets of one family; the {account} hash tag keeps them in one slot. */
  rateLimits: (account: string, family: string) => `rl:{${account}}:${family}:`,
  /** One key's bucket of video polls and downloads (no family: a poll of an unknown id counts too). */
  videoPollLimit: (account: string, keyId: string) => `rl:{${account}}:video-polls:k:${keyId}`,
  videoPollAccountLimit: (account: string) => `rl:{${account}}:video-polls:a`,

  video: (id: string) => `video:${id}`,
  videosOpen: 'videos-open',
  videoPollerLease: 'video-poller-lease',

  cursor: (chain: string) => `cursor:${chain}`,
  scanned: (chain: string) => `scanned:${chain}`,
  scannedHash: (chain: string) => `scanned-hash:${chain}`,
  scanAnchors: (chain: string) => `scan-anchors:${chain}`,
  chainHalt: (chain: string) => `chain-halt:${chain}`,
  /** The escrow's per-charge cap (atomic units), as the watcher last read it: holds above it are refused. */
  escrowCap: (chain: string) => `escrow-cap:${chain}`,
  /** The escrow's withdrawal delay (seconds), as the watcher last read it: what bounds a chain's debit backlog. */
  escrowDelay: (chain: string) => `escrow-delay:${chain}`,
  chainAnomalies: (chain: string) => `chain-anomalies:${chain}`,
  watcherLease: (chain: string) => `watcher-lease:${chain}`,

  image: (id: string) => `image:${id}`,
  images: 'images',
  imagesBytes: 'images-bytes',

  devChains: 'dev-chains',
  demoAccount: 'demo:account',
  embeddedMark: 'embedded-default',
} as const;

/** The same names as Lua expressions, for scripts that build keys from their arguments (`prefix` in scope). */
export const luaKeys = {
  wallet: (account: string, chain: string) => `prefix .. 'wallet:' .. ${account} .. ':' .. ${chain}`,
  wallets: (chain: string) => `prefix .. 'wallets:' .. ${chain}`,
  call: (callId: string) => `prefix .. 'call:' .. ${callId}`,
  usageIndex: (account: string) => `prefix .. 'usage-idx:' .. ${account}`,
  holds: `prefix .. 'holds'`,
  ownerHolds: (owner: string) => `prefix .. 'owner-holds:' .. ${owner}`,
  keySpend: (id: string) => `prefix .. 'key-spend:' .. ${id}`,
} as const;

/** Patterns of the keys that describe one set of chains: cleared when the embedded default's dev chains restart. */
export const CHAIN_STATE_PATTERNS = [
  'wallet:*',
  'wallets:*',
  'cursor:*',
  'scanned:*',
  'scanned-hash:*',
  'scan-anchors:*',
  'chain-halt:*',
  'chain-anomalies:*',
  'debits:*',
  'holds',
  'owner-holds:*',
  'instances',
  'watcher-lease:*',
] as const;
