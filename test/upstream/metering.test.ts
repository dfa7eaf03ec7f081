import t from 'tap';
import { JsonMeter, SseMeter, type Meter } from '../../plugins/upstream/metering.js';

/** Feed `text` through `meter` cut into chunks at the given sizes; resolve with the output (and count its writes). */
async function run(meter: Meter, text: string, sizes: number[], writes = { count: 0 }): Promise<string> {
  const buf = Buffer.from(text, 'utf8');
  const chunks: Buffer[] = [];
  let at = 0;
  let i = 0;
  while (at < buf.length) {
    const n = sizes[i++ % sizes.length];
    chunks.push(buf.subarray(at, at + n));
    at += n;
  }
  const out: Buffer[] = [];
  const take = (c: Buffer | string | null) => {
    if (c === null) return;
    writes.count++;
    out.push(typeof c === 'string' ? Buffer.from(c, 'utf8') : c);
  };
  for (const c of chunks) take(meter.feed(c));
  take(meter.end());
  return Buffer.concat(out).toString('utf8');
}

const anthropicStream = [
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":100},"output_tokens":1}}}\n\n',
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  'event: ping\ndata: {"type": "ping"}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Héllo"}}\n\n',
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" wörld"}}\n\n',
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}\n\n',
  'event: message_stop\ndata: {"type":"message_stop"}\n\n',
].join('');

const chunk = (o: object) => `data: ${JSON.stringify(o)}\n\n`;
const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm' };
const openaiStream = [
  chunk({
    ...base,
    choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
    usage: null,
  }),
  chunk({ ...base, choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }], usage: null }),
  chunk({ ...base, choices: [{ index: 0, delta: { content: ' there' }, finish_reason: null }], usage: null }),
  chunk({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null }),
  chunk({
    ...base,
    choices: [],
    usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11, prompt_tokens_details: { cached_tokens: 0 } },
  }),
  'data: [DONE]\n\n',
].join('');

for (const sizes of [[100000], [1], [7, 13], [3, 64, 5]]) {
  t.test(
    `anthropic stream cut into ${sizes.join('/')}-byte chunks: passes through unchanged, usage merged`,
    async (t) => {
      const m = new SseMeter('anthropic');
      const out = await run(m, anthropicStream, sizes);
      t.equal(out, anthropicStream);
      t.same(m.reading.usage, {
        input_tokens: 12,
        cache_creation_input_tokens: 100,
        cache_read_input_tokens: 0,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 100 },
        output_tokens: 2,
      });
      t.equal(m.reading.deltas, 2);
      t.equal(m.reading.complete, true);
      t.equal(m.reading.streamError, null);
    },
  );

  t.test(
    `openai stream cut into ${sizes.join('/')}-byte chunks: usage read, usage chunk kept when asked`,
    async (t) => {
      const m = new SseMeter('openai', false);
      const out = await run(m, openaiStream, sizes);
      t.equal(out, openaiStream);
      t.equal((m.reading.usage as { completion_tokens: number }).completion_tokens, 2);
      t.equal(m.reading.complete, true);
      t.equal(m.reading.deltas, 2, 'the role and finish chunks carry no tokens');
    },
  );

  t.test(`openai stream cut into ${sizes.join('/')}-byte chunks: usage chunk removed when not asked`, async (t) => {
    const m = new SseMeter('openai', true);
    const out = await run(m, openaiStream, sizes);
    t.notMatch(out, /"choices":\[\]/);
    t.match(out, /data: \[DONE\]\n\n$/);
    t.equal(out.split('\n\n').filter(Boolean).length, 5);
    t.equal((m.reading.usage as { prompt_tokens: number }).prompt_tokens, 9);
  });
}

t.test(
  'a priced stream: only its usage event is written again, with usage.cost, at any cut and line end',
  async (t) => {
    for (const [nl, sizes] of [
      ['\n', [100000]],
      ['\n', [1]],
      ['\r\n', [7, 13]],
    ] as [string, number[]][]) {
      const fix = (s: string) => (nl === '\n' ? s : s.replace(/\n/g, '\r\n'));
      const seen: unknown[] = [];
      const price = (u: Record<string, unknown>) => {
        seen.push(structuredClone(u));
        return '0.001234';
      };
      const a = new SseMeter('anthropic', false, price);
      const aOut = await run(a, fix(anthropicStream), sizes);
      const aEvents = aOut.split(`${nl}${nl}`);
      const aIn = fix(anthropicStream).split(`${nl}${nl}`);
      const i = aIn.findIndex((e) => e.startsWith('event: message_delta'));
      t.same(
        aEvents.filter((_, j) => j !== i),
        aIn.filter((_, j) => j !== i),
        'every other event as it came',
      );
      t.equal(
        aEvents[i],
        `event: message_delta${nl}data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2,"cost":"0.001234"}}`,
      );
      t.same(seen, [a.reading.usage], 'priced once, on the usage merged with message_start');
      t.equal(a.reading.bytesOut, Buffer.byteLength(aOut), 'bytes out: what was written');

      const o = new SseMeter('openai', false, price);
      const oOut = await run(o, fix(openaiStream), sizes);
      t.match(
        oOut,
        /"usage":\{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":\{"cached_tokens":0\},"cost":"0.001234"\}\}/,
      );
      t.equal(oOut.replace(',"cost":"0.001234"', ''), fix(openaiStream), 'nothing else changed');
      t.notOk('cost' in o.reading.usage!, 'the usage read is as the upstream sent it');
      t.equal(o.reading.deltas, 2);
      t.equal(o.reading.complete, true);

      const dropped = new SseMeter('openai', true, price);
      seen.length = 0;
      t.notMatch(
        await run(dropped, fix(openaiStream), sizes),
        /cost/,
        'a usage chunk not asked for is dropped, not priced',
      );
      t.same(seen, []);
    }
    const unpriced = new SseMeter('anthropic', false, () => null);
    t.equal(await run(unpriced, anthropicStream, [100000]), anthropicStream, 'no price: the event as it came');
  },
);

t.test('one upstream chunk gives at most one write downstream', async (t) => {
  const m = new SseMeter('openai', true);
  const writes = { count: 0 };
  await run(m, openaiStream, [100000], writes);
  t.equal(writes.count, 1);
});

t.test('a chunk of whole events forwarded unchanged is passed on as the same buffer', async (t) => {
  const m = new SseMeter('anthropic');
  const chunk = Buffer.from(anthropicStream.split('\n\n').slice(0, 2).join('\n\n') + '\n\n', 'utf8');
  t.equal(m.feed(chunk), chunk);
  t.equal(m.reading.bytesOut, chunk.length);
  const half = Buffer.from('event: ping\ndata: {"type":', 'utf8');
  t.equal(m.feed(half), null, 'no whole event yet');
  t.equal(
    m.feed(Buffer.from(' "ping"}\n\n', 'utf8'))?.toString(),
    'event: ping\ndata: {"type": "ping"}\n\n',
    'joined with the carry',
  );
});

t.test('anthropic error event mid-stream is recorded, stream not complete', async (t) => {
  const m = new SseMeter('anthropic');
  const text =
    anthropicStream.slice(0, anthropicStream.indexOf('event: content_block_stop')) +
    'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n';
  await run(m, text, [50]);
  t.equal(m.reading.streamError, 'Overloaded');
  t.equal(m.reading.complete, false);
  t.equal(m.reading.deltas, 2);
  t.equal((m.reading.usage as { output_tokens: number }).output_tokens, 1);
});

t.test('CRLF-delimited events are metered too', async (t) => {
  const m = new SseMeter('openai', true);
  const crlf = openaiStream.replace(/\n\n/g, '\r\n\r\n');
  const out = await run(m, crlf, [11]);
  t.notMatch(out, /"choices":\[\]/);
  t.equal(m.reading.complete, true);
  t.ok(m.reading.usage);
});

t.test('JSON answer passes through; usage read at the end', async (t) => {
  const m = new JsonMeter();
  const body = JSON.stringify({ id: 'x', usage: { input_tokens: 3, output_tokens: 4 } });
  const out = await run(m, body, [5]);
  t.equal(out, body);
  t.same(m.reading.usage, { input_tokens: 3, output_tokens: 4 });
  t.equal(m.reading.complete, true);
});

t.test('JSON meter: a body that is not JSON has no usage', async (t) => {
  const m = new JsonMeter();
  await run(m, '<html>oops</html>', [100]);
  t.equal(m.reading.usage, null);
  t.equal(m.reading.complete, false);
});

t.test(
  'deltaChars counts the generated characters of each delta: text, thinking, tool JSON, escapes as one',
  async (t) => {
    const a = new SseMeter('anthropic');
    const ev = (delta: object) =>
      `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta })}\n\n`;
    await run(
      a,
      [
        ev({ type: 'thinking_delta', thinking: 'abcd' }),
        ev({ type: 'signature_delta', signature: 'zzzzzzzzzzzz' }),
        ev({ type: 'text_delta', text: 'line\n"quoted"' }),
        ev({ type: 'input_json_delta', partial_json: '{"a":1}' }),
      ].join(''),
      [5],
    );
    t.equal(a.reading.deltas, 3, 'the signature carries no tokens');
    t.equal(a.reading.deltaChars, 4 + 13 + 7);
    const o = new SseMeter('openai');
    await run(
      o,
      [
        chunk({ ...base, choices: [{ index: 0, delta: { content: 'héllo\tworld' }, finish_reason: null }] }),
        chunk({
          ...base,
          choices: [
            {
              index: 0,
              delta: { tool_calls: [{ index: 0, function: { arguments: '{"x":"y"}' } }] },
              finish_reason: null,
            },
          ],
        }),
        chunk({ ...base, choices: [{ index: 0, delta: { reasoning_content: '\u00e9\u00e9' }, finish_reason: null }] }),
      ].join(''),
      [9],
    );
    t.equal(o.reading.deltas, 3);
    t.equal(o.reading.deltaChars, 11 + 9 + 2);
  },
);

t.test('event ends with CRLF, LF or both, at any cut: the same events, counts and end as LF alone', async (t) => {
  const crlf = openaiStream.replace(/\n/g, '\r\n');
  // Every other event with CRLF line ends.
  const mixed = openaiStream
    .split('\n\n')
    .map((e, i) => (i % 2 === 0 ? e.replace(/\n/g, '\r\n') + '\r\n\r\n' : `${e}\n\n`))
    .slice(0, -1)
    .join('');
  for (const text of [crlf, mixed]) {
    for (const sizes of [[1], [2, 3], [100000]]) {
      const m = new SseMeter('openai', true);
      const out = await run(m, text, sizes);
      t.equal(m.reading.deltas, 2, `${sizes}: two content deltas`);
      t.equal(m.reading.deltaChars, 8);
      t.ok(m.reading.complete, 'ended by [DONE]');
      t.same(m.reading.usage, {
        prompt_tokens: 9,
        completion_tokens: 2,
        total_tokens: 11,
        prompt_tokens_details: { cached_tokens: 0 },
      });
      t.notOk(out.includes('"choices":[]'), 'the usage chunk the caller did not ask for is removed');
      t.ok(out.endsWith('[DONE]\r\n\r\n') || out.endsWith('[DONE]\n\n'));
    }
  }
});

t.test(
  '[DONE] inside generated text does not end the answer; a stream cut before data: [DONE] is not complete',
  async (t) => {
    const text = chunk({ ...base, choices: [{ index: 0, delta: { content: 'say [DONE] now' }, finish_reason: null }] });
    const m = new SseMeter('openai');
    await run(m, text, [5]);
    t.equal(m.reading.deltas, 1);
    t.notOk(m.reading.complete);
    const whole = new SseMeter('openai');
    await run(whole, `${text}data: [DONE]\n\n`, [5]);
    t.ok(whole.reading.complete);
  },
);

t.test(
  'OpenAI deltas: tool-call arguments and reasoning count as the first generated string of their chunk',
  async (t) => {
    const tool = (args: string) =>
      chunk({
        ...base,
        choices: [
          {
            index: 0,
            delta: { content: null, tool_calls: [{ index: 0, function: { arguments: args } }] },
            finish_reason: null,
          },
        ],
      });
    const both = chunk({
      ...base,
      choices: [{ index: 0, delta: { reasoning_content: 'think', content: 'no' }, finish_reason: null }],
    });
    const text = tool('{"pa') + tool('th":"a.ts"}') + both + 'data: [DONE]\n\n';
    for (const sizes of [[1], [100000]]) {
      const m = new SseMeter('openai');
      await run(m, text, sizes);
      t.equal(m.reading.deltas, 3, `${sizes}: three deltas`);
      // {"pa = 4, th":"a.ts"} = 11 (escapes count one each), then the reasoning, which comes first in its chunk: 5.
      t.equal(m.reading.deltaChars, 4 + 11 + 5);
      t.ok(m.reading.complete);
    }
  },
);

t.test(
  'deltas in any script, cut inside their UTF-8 sequences: counted as JavaScript counts them, forwarded byte for byte',
  async (t) => {
    const texts = ['日本語のテキスト', 'emoji 🙂👍🏽 ok', 'Ünïcödé \u2028 \\ "q"', 'ascii', '\u{10348}x', 'é'];
    const units = texts.reduce((n, s) => n + s.length, 0);
    // OpenAI-compatible providers that repeat the role in every chunk write a delta that does not open with content.
    const openai =
      texts
        .map((content, i) =>
          chunk({
            ...base,
            choices: [{ index: 0, delta: i % 2 ? { content } : { role: 'assistant', content }, finish_reason: null }],
          }),
        )
        .join('') + 'data: [DONE]\n\n';
    const anthropic =
      texts
        .map(
          (text) =>
            `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } })}\n\n`,
        )
        .join('') + 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    for (const sizes of [[1], [2, 5], [3], [100000]]) {
      const o = new SseMeter('openai');
      t.equal(await run(o, openai, sizes), openai, `openai ${sizes}: as it came`);
      t.equal(o.reading.deltas, texts.length);
      t.equal(o.reading.deltaChars, units, `openai ${sizes}: UTF-16 units`);
      t.equal(o.reading.bytesOut, Buffer.byteLength(openai));
      const a = new SseMeter('anthropic');
      t.equal(await run(a, anthropic, sizes), anthropic, `anthropic ${sizes}: as it came`);
      t.equal(a.reading.deltas, texts.length);
      t.equal(a.reading.deltaChars, units, `anthropic ${sizes}: UTF-16 units`);
      t.ok(a.reading.complete);
    }
  },
);

t.test('an event is named by its own event: line, whole', async (t) => {
  const m = new SseMeter('anthropic', false, () => '0.000001');
  const text =
    'event: message_stop_later\ndata: {"type":"x"}\n\n' +
    'data: {"type":"x","note":"\\nevent: message_stop"}\n\n' +
    'event: message_deltas\ndata: {"type":"message_delta","usage":{"output_tokens":5}}\n\n' +
    'event: errors\ndata: {"type":"error","error":{"message":"no"}}\n\n' +
    'id: 7\nevent: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ab"}}\n\n';
  t.equal(await run(m, text, [4]), text, 'nothing priced or dropped');
  t.equal(m.reading.complete, false);
  t.equal(m.reading.usage, null);
  t.equal(m.reading.streamError, null);
  t.equal(m.reading.deltas, 1, 'a field line after id: names its event');
  t.equal(m.reading.deltaChars, 2);
});

t.test('an event that runs past the bound without its end overflows the meter: nothing of it goes out', async (t) => {
  const first = chunk({ ...base, choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] });
  const m = new SseMeter('openai', false, undefined, 1024);
  t.equal(m.feed(Buffer.from(first + 'data: {"choices":[{"delta":{"content":"'))?.toString(), first, 'the whole event');
  // Lines, but no blank line: still the same event.
  for (let i = 0; i < 4; i++) t.equal(m.feed(Buffer.from(`${'x'.repeat(200)}\n`)), null);
  t.notOk(m.overflowed, 'within the bound');
  t.equal(m.feed(Buffer.from('y'.repeat(400))), null);
  t.ok(m.overflowed, 'past it');
  t.equal(m.feed(Buffer.from('"}}]}\n\n')), null, 'its end, once overflowed, is not forwarded');
  t.equal(m.end(), null);
  t.equal(m.reading.deltas, 1, 'only what went out counts');
  t.equal(m.reading.bytesOut, first.length);
});

t.test('an event carried over many chunks ends where its blank line ends, split across chunks or not', async (t) => {
  for (const length of [300, 70_000]) {
    const e = chunk({ ...base, choices: [{ index: 0, delta: { content: 'z'.repeat(length) }, finish_reason: null }] });
    for (const nl of ['\n', '\r\n']) {
      const event = e.replace(/\n/g, nl);
      for (const cut of [1, 2, 3, 7]) {
        const m = new SseMeter('openai', false, undefined, 1024 * 1024);
        const out: string[] = [];
        const feed = (piece: string) => {
          const o = m.feed(Buffer.from(piece));
          if (o) out.push(o.toString());
        };
        // Each event: all but its last six bytes in one chunk, then those in `cut`-byte chunks (the blank line split
        // across them).
        for (const ev of [event, event]) {
          feed(ev.slice(0, -6));
          for (let at = ev.length - 6; at < ev.length; at += cut) feed(ev.slice(at, Math.min(at + cut, ev.length)));
        }
        t.equal(m.end(), null, 'nothing left at the end');
        t.ok(out.join('') === event + event, `${length}, ${JSON.stringify(nl)}, ${cut}-byte chunks: as it came`);
        t.equal(out.length, 2, 'each event written once it is whole');
        t.equal(m.reading.deltaChars, 2 * length);
      }
    }
  }
});

t.test("a long event's CRLF line ends cut after their CR do not join its carry again at each chunk", async (t) => {
  const lines = Array.from({ length: 200 }, (_, i) => `data: ${i === 0 ? '{"choices":[],' : ''}"${'x'.repeat(1000)}"`);
  const event = `${lines.join('\r\n')}\r\n\r\n`;
  const m = new SseMeter('openai');
  // Count the joins of more than the join-at-once size (Buffer.concat of the carry).
  const concat = Buffer.concat;
  let joins = 0;
  Buffer.concat = ((list: readonly Uint8Array[], length?: number) => {
    const out = concat(list, length);
    if (out.length > 64 * 1024) joins++;
    return out;
  }) as typeof Buffer.concat;
  const out: Buffer[] = [];
  try {
    // Each line's CR alone in a chunk; the next chunk begins with its LF.
    let at = 0;
    for (let cr = event.indexOf('\r'); cr >= 0; cr = event.indexOf('\r', cr + 1)) {
      for (const piece of [event.slice(at, cr), '\r']) {
        const o = m.feed(Buffer.from(piece));
        if (o) out.push(o);
      }
      at = cr + 1;
    }
    const o = m.feed(Buffer.from(event.slice(at)));
    if (o) out.push(o);
  } finally {
    Buffer.concat = concat;
  }
  t.equal(Buffer.concat(out).toString(), event, 'the event goes out once, as it came');
  // Once as it passes the size below which a carry is joined at each chunk, once when its blank line has come.
  t.equal(joins, 2, 'its carry is joined twice in all, past 64 KiB');
});

t.test('[DONE] ends an answer only as the whole data of its event', async (t) => {
  const short = 'data: {"choices":[{"delta":{"content":"[DONE]"}}]}\n\n';
  t.ok(short.length <= 64, 'an event as short as data: [DONE] with an id line');
  const m = new SseMeter('openai');
  await run(m, short, [100000]);
  t.equal(m.reading.deltas, 1, 'a delta whose text is [DONE] is counted');
  t.equal(m.reading.deltaChars, 6);
  t.notOk(m.reading.complete, 'and does not end the answer');
  for (const end of ['data:[DONE]\n\n', 'id: 7\ndata: [DONE]\r\n\r\n', ': ping\ndata: [DONE]\n\n', 'data: [DONE]']) {
    const done = new SseMeter('openai');
    await run(done, short + end, [5]);
    t.ok(done.reading.complete, `${JSON.stringify(end)} ends it`);
  }
  const not = new SseMeter('openai');
  await run(not, `${short}data: [DONE] later\n\n`, [100000]);
  t.notOk(not.reading.complete, 'data that only begins with [DONE] does not');
});

t.test('a priced usage event keeps its other lines, wherever they are, and its data as one line', async (t) => {
  const usage = '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}';
  const m = new SseMeter('anthropic', false, () => '0.000002');
  const out = await run(m, `data: ${usage}\nid: 9\nevent: message_delta\n\n`, [4]);
  t.equal(
    out,
    `data: ${usage.replace('"output_tokens":2}', '"output_tokens":2,"cost":"0.000002"}')}\nid: 9\nevent: message_delta\n\n`,
  );
  t.same(m.reading.usage, { output_tokens: 2 }, "the usage read is the upstream's");
});
