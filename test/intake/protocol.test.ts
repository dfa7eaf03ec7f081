// The protocol of a refusal (plugins/intake/protocol.ts), from a path or from what Node's parser had of a request.
import t from 'tap';
import { protocolOf, protocolOfRefused } from '../../plugins/intake/protocol.js';

t.test('a path: the messages endpoints are Anthropic, the rest OpenAI, the query not counted', async (t) => {
  t.equal(protocolOf('/v1/messages'), 'anthropic');
  t.equal(protocolOf('/v1/messages/count_tokens?beta=true'), 'anthropic');
  t.equal(protocolOf('/api/v1/messages'), 'anthropic', 'under a host app prefix');
  t.equal(protocolOf('/v1/chat/completions'), 'openai');
  t.equal(protocolOf('/v1/chat/completions?next=/v1/messages'), 'openai');
});

t.test(
  'a refused request: its pending path, else its request line before the refused byte, else anthropic-version',
  async (t) => {
    const b = (s: string) => Buffer.from(s, 'latin1');
    t.equal(
      protocolOfRefused(b('GET /v1/health HTTP/1.1\r\n'), undefined, '/v1/messages'),
      'anthropic',
      'a pending request decides',
    );
    t.equal(
      protocolOfRefused(b(`${'\r\n'.repeat(500)}POST /v1/messages HTTP/1.1\r\nx: \r`), undefined, undefined),
      'anthropic',
      'after any CR/LF',
    );
    const pipelined =
      'POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 0\r\n\r\nPOST /v1/messages HTTP/1.1\r\nx: \r';
    t.equal(protocolOfRefused(b(pipelined), undefined, undefined), 'anthropic', 'the last request line');
    t.equal(
      protocolOfRefused(b(pipelined), pipelined.indexOf('\r\n\r\n'), undefined),
      'openai',
      'the last one before the refused byte',
    );
    t.equal(
      protocolOfRefused(b('x-a: b\r\nAnthropic-Version: 2023-06-01\r\n'), undefined, undefined),
      'anthropic',
      'headers only',
    );
    t.equal(protocolOfRefused(b('x-a: b\r\nauthorization: Bearer k\r\n'), undefined, undefined), 'openai');
    t.equal(protocolOfRefused(undefined, undefined, undefined), 'openai', 'nothing known');
  },
);
