// The spec's video table, every cell (SPEC "Sizes and durations per family", "Reference rules"): planVideo accepts
// exactly what a model's family takes, defaults included, and refuses the rest with a 400 that names what it takes.
import t from 'tap';
import type { VideoModel } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import { VIDEO_FAMILY_RULES, planVideo } from '../../policies/videos.js';

const model = (id: string, family: VideoModel['family'], more: Partial<VideoModel> = {}): VideoModel => ({
  kind: 'video',
  id,
  family,
  provider: 'p',
  max_references: 0,
  last_reference: false,
  ...more,
});
const vidA = model('vidA-v6', 'vidA');
const vidB25 = model('vidB-2.5', 'vidB', { max_references: 30, last_reference: true });
const vidB21 = model('vidB-2.1', 'vidB');
const vidC = model('vidC-3', 'vidC');
/** An operator's model of a family under an id of its own: the family decides, not the id. */
const custom = model('studio-clip', 'vidC');

const SPEC = {
  vidA: { sizes: ['1280x720', '720x1280'], seconds: [4, 8, 12], required: false },
  vidB: { sizes: ['854x480', '480x854', '1280x720', '720x1280'], seconds: [5, 8, 12, 16, 20, 24, 30], required: false },
  vidC: { sizes: ['640x480', '1280x720', '1920x1080'], seconds: [5, 8], required: true },
} as const;
const ALL_SIZES = [
  '1280x720',
  '720x1280',
  '854x480',
  '480x854',
  '640x480',
  '1920x1080',
  '1080x1920',
  '1024x1792',
  '1x1',
  'big',
];
const ALL_SECONDS = [1, 4, 5, 6, 8, 10, 12, 16, 20, 24, 30, 60];

function refusal(fn: () => unknown): GatewayError {
  try {
    fn();
  } catch (err) {
    if (err instanceof GatewayError) return err;
    throw err;
  }
  throw new Error('no refusal');
}

t.test("the family table is the spec's", async (t) => {
  for (const [family, row] of Object.entries(SPEC)) {
    const rule = VIDEO_FAMILY_RULES[family as keyof typeof SPEC];
    t.same(rule.sizes, row.sizes, `${family} sizes`);
    t.same(rule.seconds, row.seconds, `${family} seconds`);
    t.equal(
      rule.referenceRequired,
      row.required,
      `${family} input_reference ${row.required ? 'required' : 'optional'}`,
    );
  }
});

t.test('every size and duration: accepted exactly where the family takes it', async (t) => {
  for (const m of [vidA, vidB25, vidB21, vidC, custom]) {
    const row = SPEC[m.family];
    const refs = { inputs: row.required ? 1 : 0, lasts: 0 };
    for (const size of ALL_SIZES) {
      for (const seconds of ALL_SECONDS) {
        const ok =
          (row.sizes as readonly string[]).includes(size) && (row.seconds as readonly number[]).includes(seconds);
        const run = () => planVideo(m, { prompt: 'p', size, seconds }, refs);
        if (ok) {
          const plan = run();
          t.equal(`${plan.width}x${plan.height}`, size);
          t.equal(plan.seconds, seconds);
        } else {
          const e = refusal(run);
          t.equal(e.status, 400, `${m.id} ${size} ${seconds}s`);
          t.ok(e.code === 'unsupported_video_size' || e.code === 'unsupported_video_seconds');
        }
      }
    }
  }
});

t.test('seconds as a string (multipart, the SDK) or an integer; anything else refused', async (t) => {
  t.equal(planVideo(vidA, { prompt: 'p', seconds: '8' }, { inputs: 0, lasts: 0 }).seconds, 8);
  t.equal(planVideo(vidA, { prompt: 'p', seconds: 12 }, { inputs: 0, lasts: 0 }).seconds, 12);
  for (const bad of ['8.0', 8.5, '8s', true, {}, -4, '']) {
    t.equal(
      refusal(() => planVideo(vidA, { prompt: 'p', seconds: bad }, { inputs: 0, lasts: 0 })).code,
      'unsupported_video_seconds',
      JSON.stringify(bad),
    );
  }
  t.equal(
    refusal(() => planVideo(vidA, { prompt: 'p', size: 1280 }, { inputs: 0, lasts: 0 })).code,
    'unsupported_video_size',
  );
});

t.test(
  'defaults (1280x720, 4 s) are checked like any value: vidB and vidC without seconds are a 400 naming the values',
  async (t) => {
    const plan = planVideo(vidA, { prompt: 'p' }, { inputs: 0, lasts: 0 });
    t.same([plan.size, plan.seconds], ['1280x720', 4], 'vidA takes both defaults');
    const b = refusal(() => planVideo(vidB25, { prompt: 'p' }, { inputs: 0, lasts: 0 }));
    t.equal(b.code, 'unsupported_video_seconds');
    t.equal(b.param, 'seconds');
    t.equal(b.message, 'vidB-2.5 (vidB) takes seconds 5, 8, 12, 16, 20, 24 or 30; got 4 (the default).');
    const c = refusal(() => planVideo(vidC, { prompt: 'p' }, { inputs: 1, lasts: 0 }));
    t.equal(c.message, 'vidC-3 (vidC) takes seconds 5 or 8; got 4 (the default).');
    t.equal(
      planVideo(vidC, { prompt: 'p', seconds: 5 }, { inputs: 1, lasts: 0 }).size,
      '1280x720',
      'vidC takes the default size',
    );
    const s = refusal(() => planVideo(vidC, { prompt: 'p', size: '720x1280', seconds: 5 }, { inputs: 1, lasts: 0 }));
    t.equal(s.message, 'vidC-3 (vidC) takes size 640x480, 1280x720 or 1920x1080; got "720x1280".');
  },
);

t.test('prompt: required, at most 8,000 characters (code points)', async (t) => {
  for (const bad of [undefined, '', 7, null]) {
    const e = refusal(() => planVideo(vidA, { prompt: bad }, { inputs: 0, lasts: 0 }));
    t.equal(e.code, 'invalid_request');
    t.equal(e.param, 'prompt');
  }
  t.ok(planVideo(vidA, { prompt: 'x'.repeat(8000) }, { inputs: 0, lasts: 0 }));
  t.ok(
    planVideo(vidA, { prompt: '🎬'.repeat(8000) }, { inputs: 0, lasts: 0 }),
    '8,000 emoji are 16,000 UTF-16 units and 8,000 characters',
  );
  t.match(
    refusal(() => planVideo(vidA, { prompt: 'x'.repeat(8001) }, { inputs: 0, lasts: 0 })).message,
    /at most 8,000 characters/,
  );
});

t.test('references, every rule', async (t) => {
  const plan = (m: VideoModel, inputs: number, lasts = 0, seconds = m.family === 'vidA' ? 4 : 5) =>
    planVideo(m, { prompt: 'p', seconds, size: '1280x720' }, { inputs, lasts });
  // Rule 1: one input_reference is a starting frame; vidB cover-crops it, vidA and vidC contain it.
  t.same(plan(vidA, 1).references, { kind: 'frame', lastFrame: false, fit: 'contain' });
  t.same(plan(vidB21, 1).references, { kind: 'frame', lastFrame: false, fit: 'cover' });
  t.same(plan(vidC, 1).references, { kind: 'frame', lastFrame: false, fit: 'contain' });
  t.same(plan(vidA, 0).references, { kind: 'none' }, 'optional on vidA');
  t.same(plan(vidB25, 0).references, { kind: 'none' }, 'optional on vidB');
  // Rule 2: two or more are subject references, only where max_references allows, up to 30.
  t.same(plan(vidB25, 2).references, { kind: 'subjects', count: 2 });
  t.same(plan(vidB25, 30).references, { kind: 'subjects', count: 30 });
  // Rule 3: more than a model takes is a 400, never dropped.
  const over = refusal(() => plan(vidB25, 31));
  t.same([over.code, over.message], ['too_many_references', 'vidB-2.5 takes up to 30 input_reference images; got 31.']);
  for (const m of [vidA, vidB21, vidC]) {
    const e = refusal(() => plan(m, 2));
    t.same([e.code, e.status], ['too_many_references', 400], m.id);
    t.match(e.message, /takes one input_reference \(a starting frame\); got 2/);
  }
  // Rule 4: last_reference only on vidB-2.5, only beside exactly one input_reference.
  t.same(plan(vidB25, 1, 1).references, { kind: 'frame', lastFrame: true, fit: 'cover' });
  for (const [m, inputs, lasts] of [
    [vidB25, 0, 1],
    [vidB25, 2, 1],
    [vidB25, 1, 2],
    [vidB21, 1, 1],
    [vidA, 1, 1],
    [vidC, 1, 1],
  ] as const) {
    const e = refusal(() => plan(m, inputs, lasts));
    t.same(
      [e.code, e.status, e.param],
      ['invalid_last_reference', 400, 'last_reference'],
      `${m.id} inputs=${inputs} lasts=${lasts}`,
    );
  }
  // vidC needs one.
  const c = refusal(() => plan(vidC, 0));
  t.same([c.code, c.status, c.param], ['missing_input_reference', 400, 'input_reference']);
  t.equal(refusal(() => plan(custom, 0)).code, 'missing_input_reference', 'by family, not by id');
});
