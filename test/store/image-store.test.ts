import t from 'tap';
import { ImageStore } from '../../plugins/store/image-store.js';
import { testRedis } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

const { redis } = await testRedis(t);

t.test('stores bytes under an unguessable id with a TTL, binary-safe, and serves them back', async (t) => {
  const store = new ImageStore(redis, { ttlMs: 60_000, maxBytes: 1_000_000 });
  const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 31) & 255));
  const before = Date.now();
  const put = await store.put(bytes, 'image/png');
  t.ok(put);
  t.match(put!.id, /^[A-Za-z0-9_-]{32}$/);
  t.ok(
    put!.expires >= before + 59_000 && put!.expires <= Date.now() + 61_000,
    "expires a TTL from now, on Redis's clock",
  );
  const got = await store.get(put!.id);
  t.equal(got!.type, 'image/png');
  t.ok(got!.data.equals(bytes), 'the same bytes');
  t.equal(got!.expires, put!.expires);
  t.equal(await store.get('x'.repeat(32)), null, 'an unknown id');
  t.equal(await store.get('../etc'), null, 'not an id');
  const other = await store.put(bytes, 'image/png');
  t.not(other!.id, put!.id);
});

t.test('the byte budget: a store past it is refused; removed and expired images give their bytes back', async (t) => {
  const { redis: r } = await testRedis(t);
  const store = new ImageStore(r, { ttlMs: 300, maxBytes: 250 });
  const a = await store.put(Buffer.alloc(100), 'image/png');
  const b = await store.put(Buffer.alloc(100), 'image/png');
  t.ok(a && b);
  t.equal(await store.put(Buffer.alloc(100), 'image/png'), null, 'no room for a third');
  await store.remove(a!.id, 100);
  t.equal(await store.get(a!.id), null, 'removed');
  const c = await store.put(Buffer.alloc(100), 'image/png');
  t.ok(c, 'its room is free again');
  t.equal(await store.put(Buffer.alloc(100), 'image/png'), null);
  await until(
    'b and c expired (ttl 300 ms)',
    async () => (await store.get(b!.id)) === null && (await store.get(c!.id)) === null,
    5_000,
    20,
  );
  t.equal(await store.get(b!.id), null, 'expired');
  t.ok(await store.put(Buffer.alloc(200), 'image/png'), 'expired images left the count');
});
