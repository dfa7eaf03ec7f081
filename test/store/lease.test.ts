import t from 'tap';
import { Lease } from '../../plugins/store/lease.js';
import { testRedis } from '../helpers/harness.js';

// A prefix of this file's own, deleted in teardown whatever the tests did.
const { redis } = await testRedis(t);

const pair = (key: string, ttlMs = 10_000) =>
  [new Lease(redis, key, 'a', ttlMs), new Lease(redis, key, 'b', ttlMs)] as const;

t.test('a lease taken by A is refused to B; A taking it again keeps it', async (t) => {
  const [a, b] = pair('take');
  t.equal(await a.take(), true);
  t.equal(await b.take(), false);
  t.equal(b.held, false);
  t.equal(await redis.get('take'), 'a');
  t.equal(await a.take(), true, 'the owner takes its own lease again');
  t.equal(await redis.get('take'), 'a');
});

t.test('a renewal by a non-owner fails and leaves the lease as it was', async (t) => {
  const [a, b] = pair('renew', 5_000);
  await a.take();
  await redis.pexpire('renew', 1_000);
  t.equal(await b.renew(), false);
  t.ok((await redis.pttl('renew')) <= 1_000, 'expiry not extended');
  t.equal(await a.renew(), true);
  t.ok((await redis.pttl('renew')) > 1_000, "the owner's renewal extends it");
  t.equal(await redis.get('renew'), 'a');
});

t.test('a release by a non-owner leaves the lease; the owner releases it', async (t) => {
  const [a, b] = pair('release');
  await a.take();
  t.equal(await b.release(), false);
  t.equal(await redis.get('release'), 'a');
  t.equal(await a.release(), true);
  t.equal(a.held, false);
  t.equal(await redis.get('release'), null);
  t.equal(await b.take(), true, 'free again');
});

t.test('an expired lease goes to B; A can then neither renew nor release it', async (t) => {
  const [a, b] = pair('expiry', 100);
  t.equal(await a.take(), true);
  t.equal(await b.take(), false);
  // Expiry is Redis's: wait until Redis no longer has the key.
  while ((await redis.exists('expiry')) === 1) await new Promise((r) => setTimeout(r, 20));
  t.equal(await b.take(), true);
  t.equal(await a.renew(), false);
  t.equal(a.held, false);
  t.equal(await a.release(), false);
  t.equal(await redis.get('expiry'), 'b');
});

t.test('keep: no command while fresh; renews after renewAfterMs; a lost lease is not kept', async (t) => {
  const [a, b] = pair('keep');
  t.equal(await a.keep(50), true, 'taken');
  await redis.del('keep');
  t.equal(await a.keep(60_000), true, 'fresh: not asked of Redis');
  t.equal(await b.take(), true, 'B takes the deleted key');
  await new Promise((r) => setTimeout(r, 60));
  t.equal(await a.keep(50), false, 'renewal finds it lost, and B holds it');
  t.equal(a.held, false);
  await b.release();
  t.equal(await a.keep(50), true, 'taken again once free');
  t.equal(await redis.get('keep'), 'a');
});
