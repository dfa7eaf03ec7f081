// A prompt just over the model's context window passes the gateway's own size check (text that could not fit even at
// 64 bytes a token), reaches the upstream and is refused there, as every provider refuses it: the caller gets the
// provider's 400 and message in its own protocol's shape, and the call costs nothing. Prompts are sized with the
// simulator's count (4k ASCII characters are k tokens): about 1 MB each.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { CHAT, MESSAGE, refusal, text } from '../helpers/prompts.js';

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);

const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });

/** Runs `call`, then checks its record is free at 0 and the wallet is as it was. */
async function costsNothing(t: Test, call: () => Promise<string | null | undefined>): Promise<void> {
  const before = await readWallet(h.redis, h.account, 'chain_a');
  const requestId = await call();
  t.match(requestId, /^req_/, 'the refusal carries the request id');
  const rec = await until(`record of ${requestId}`, async () => {
    const r = await getCallRecord(h.redis, requestId!);
    return r && r.status !== 'held' ? r : null;
  });
  t.equal(rec.status, 'free', 'recorded free');
  t.equal(rec.priceAtomic, 0n, 'priced 0');
  t.ok(rec.held > 0n, 'its hold was placed, then released');
  const after = await readWallet(h.redis, h.account, 'chain_a');
  t.same(after, before, 'the wallet is as it was: nothing held, pending or debited');
}

const haiku = {
  model: 'alpha-haiku-4-5',
  max_tokens: 16,
  messages: [{ role: 'user' as const, content: text(200_001 - MESSAGE) }],
};

t.test(
  'Anthropic SDK: one token over a 200,000-token window -> 400 "prompt is too long" in Anthropic\'s shape, free',
  async (t) => {
    await costsNothing(t, async () => {
      const err = await refusal(t, anthropic.messages.create(haiku), Anthropic.BadRequestError);
      t.equal(err.status, 400);
      t.match(err.error, {
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: 'prompt is too long: 200001 tokens > 200000 maximum',
          code: 'upstream_invalid_request',
        },
      });
      return err.requestID;
    });
  },
);

t.test('Anthropic SDK, streaming: the same 400 before the stream starts, free', async (t) => {
  await costsNothing(t, async () => {
    const err = await refusal(t, anthropic.messages.stream(haiku).finalMessage(), Anthropic.BadRequestError);
    t.equal(err.status, 400);
    t.match(err.error, { type: 'error', error: { message: 'prompt is too long: 200001 tokens > 200000 maximum' } });
    return err.requestID;
  });
});

const gamma = {
  model: 'gamma-q3',
  max_tokens: 16,
  messages: [{ role: 'user' as const, content: text(262_145 - CHAT) }],
};
const gammaMessage =
  "This model's maximum context length is 262144 tokens. However, your messages resulted in 262145 tokens. Please reduce the length of the messages.";

t.test(
  "OpenAI SDK: one token over an open-weight host's window -> 400 with the host's message in OpenAI's shape, free",
  async (t) => {
    await costsNothing(t, async () => {
      const err = await refusal(t, openai.chat.completions.create(gamma), OpenAI.BadRequestError);
      t.equal(err.status, 400);
      t.same(err.error, {
        message: gammaMessage,
        type: 'invalid_request_error',
        param: null,
        code: 'upstream_invalid_request',
      });
      return err.requestID;
    });
  },
);

t.test('OpenAI SDK, streaming: the same 400 before the stream starts, free', async (t) => {
  await costsNothing(t, async () => {
    const err = await refusal(t, openai.chat.completions.create({ ...gamma, stream: true }), OpenAI.BadRequestError);
    t.equal(err.status, 400);
    t.equal(err.message, `400 ${gammaMessage}`);
    return err.requestID;
  });
});

t.test("OpenAI SDK on an alpha model: Anthropic's refusal through its OpenAI-compatible endpoint, free", async (t) => {
  await costsNothing(t, async () => {
    const err = await refusal(
      t,
      openai.chat.completions.create({ ...haiku, messages: [{ role: 'user', content: text(200_001 - CHAT) }] }),
      OpenAI.BadRequestError,
    );
    t.same(err.error, {
      message: 'prompt is too long: 200001 tokens > 200000 maximum',
      type: 'invalid_request_error',
      param: null,
      code: 'upstream_invalid_request',
    });
    return err.requestID;
  });
});
