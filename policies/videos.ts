/**
 * What a video submit may ask (SPEC "Video submit request", "Sizes and durations per family", "Reference rules",
 * "Limits"): the family table, and one pure check of a request against its model's config, run before any hold.
 * The family of a model is its config's (`family`), as are the references it takes beyond a starting frame
 * (`max_references`) and whether it takes a last frame (`last_reference`); durations are pricing's
 * (VIDEO_DURATIONS), which prices exactly those.
 */
import { GatewayError } from './errors.js';
import type { VideoModel } from './catalog.js';
import { VIDEO_DURATIONS, type VideoFamily } from '../pricing/index.js';

/**
 * How a starting frame meets the video size (SPEC "Reference rules" 5): `cover` scales it to cover the frame and
 * crops the overflow (vidB); `contain` scales it to fit inside and pads the rest, so its aspect ratio is kept and
 * nothing is cropped (vidA, vidC).
 */
export type FrameFit = 'cover' | 'contain';

/** One family's row of the spec's table. */
export interface VideoFamilyRule {
  readonly sizes: readonly string[];
  readonly seconds: readonly number[];
  /** A request without an input_reference is refused (vidC). */
  readonly referenceRequired: boolean;
  readonly frameFit: FrameFit;
}

/** The spec's table, per family. */
export const VIDEO_FAMILY_RULES: Readonly<Record<VideoFamily, VideoFamilyRule>> = Object.freeze({
  vidA: {
    sizes: ['1280x720', '720x1280'],
    seconds: VIDEO_DURATIONS.vidA,
    referenceRequired: false,
    frameFit: 'contain',
  },
  vidB: {
    sizes: ['854x480', '480x854', '1280x720', '720x1280'],
    seconds: VIDEO_DURATIONS.vidB,
    referenceRequired: false,
    frameFit: 'cover',
  },
  vidC: {
    sizes: ['640x480', '1280x720', '1920x1080'],
    seconds: VIDEO_DURATIONS.vidC,
    referenceRequired: true,
    frameFit: 'contain',
  },
});

/** SPEC default size: checked against the model like any value the caller sends. */
export const DEFAULT_VIDEO_SIZE = '1280x720';
/** SPEC default duration, checked the same way (vidB and vidC take no 4 s clip). */
export const DEFAULT_VIDEO_SECONDS = 4;
/** SPEC Limits: the prompt, in characters (code points). */
export const MAX_VIDEO_PROMPT_CHARS = 8000;
/** SPEC Limits: subject and style references, the most any model takes. */
export const MAX_VIDEO_REFERENCES = 30;

/** The scalar fields of a submit, as read from JSON or from multipart text fields. */
export interface VideoFields {
  readonly model?: unknown;
  readonly prompt?: unknown;
  readonly size?: unknown;
  readonly seconds?: unknown;
}

/** What the references of a submit are. */
export type ReferenceMode =
  | { readonly kind: 'none' }
  /** One input_reference: a starting frame, with a last frame when last_reference came too. */
  | { readonly kind: 'frame'; readonly lastFrame: boolean; readonly fit: FrameFit }
  /** Two or more input_reference: subject and style references, cited @image1, @image2, ...; never cropped. */
  | { readonly kind: 'subjects'; readonly count: number };

/** A submit that passed every rule of its model. */
export interface VideoPlan {
  readonly prompt: string;
  readonly width: number;
  readonly height: number;
  /** `WIDTHxHEIGHT`. */
  readonly size: string;
  readonly seconds: number;
  readonly references: ReferenceMode;
}

function bad(
  code: 'invalid_request' | 'unsupported_video_size' | 'unsupported_video_seconds',
  param: string,
  message: string,
): GatewayError {
  return new GatewayError(code, { param, message });
}

/** "a, b or c". */
function oneOf(values: readonly (string | number)[]): string {
  return values.length === 1 ? String(values[0]) : `${values.slice(0, -1).join(', ')} or ${values.at(-1)}`;
}

/** The prompt: a string of 1 to 8,000 characters. */
export function checkPrompt(v: unknown): string {
  if (typeof v !== 'string' || v.length === 0) return badPrompt('prompt: a prompt is required.');
  // Code points, as a caller counts characters; only long strings need the count.
  if (v.length > MAX_VIDEO_PROMPT_CHARS && [...v].length > MAX_VIDEO_PROMPT_CHARS) {
    return badPrompt(`prompt: at most ${MAX_VIDEO_PROMPT_CHARS.toLocaleString('en-US')} characters.`);
  }
  return v;
}

function badPrompt(message: string): never {
  throw bad('invalid_request', 'prompt', message);
}

/** Whole seconds from a JSON integer or a string of digits (multipart fields are strings; OpenAI's SDK sends "8"). */
function secondsOf(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isInteger(v)) return v;
  if (typeof v === 'string' && /^\d{1,4}$/.test(v)) return Number(v);
  return undefined;
}

/**
 * Check a submit against its model (SPEC "Video submit request"): prompt, size and seconds (defaults included) in
 * the family's table, and the references: vidC needs one; two or more only on a model with `max_references` that
 * many; last_reference only on a model that takes it, beside exactly one input_reference. Refusals are 400s that
 * say what the model takes; nothing is dropped or changed to fit.
 */
export function planVideo(
  model: VideoModel,
  fields: VideoFields,
  refs: { readonly inputs: number; readonly lasts: number },
): VideoPlan {
  const rule = VIDEO_FAMILY_RULES[model.family];
  const prompt = checkPrompt(fields.prompt);
  const takes = `${model.id} (${model.family})`;

  const sizeGiven = fields.size !== undefined && fields.size !== null;
  const size = sizeGiven ? fields.size : DEFAULT_VIDEO_SIZE;
  if (typeof size !== 'string' || !rule.sizes.includes(size)) {
    const got = sizeGiven ? JSON.stringify(size) : `${DEFAULT_VIDEO_SIZE} (the default)`;
    throw bad('unsupported_video_size', 'size', `${takes} takes size ${oneOf(rule.sizes)}; got ${got}.`);
  }
  const secondsGiven = fields.seconds !== undefined && fields.seconds !== null;
  const seconds = secondsGiven ? secondsOf(fields.seconds) : DEFAULT_VIDEO_SECONDS;
  if (seconds === undefined || !rule.seconds.includes(seconds)) {
    const got = secondsGiven ? JSON.stringify(fields.seconds) : `${DEFAULT_VIDEO_SECONDS} (the default)`;
    throw bad('unsupported_video_seconds', 'seconds', `${takes} takes seconds ${oneOf(rule.seconds)}; got ${got}.`);
  }
  const [width, height] = size.split('x').map(Number) as [number, number];
  return { prompt, width, height, size, seconds, references: referenceMode(model, rule, refs) };
}

function referenceMode(
  model: VideoModel,
  rule: VideoFamilyRule,
  { inputs, lasts }: { inputs: number; lasts: number },
): ReferenceMode {
  if (lasts > 1)
    throw new GatewayError('invalid_last_reference', {
      param: 'last_reference',
      message: `At most one last_reference; got ${lasts}.`,
    });
  if (lasts === 1 && !model.last_reference) {
    throw new GatewayError('invalid_last_reference', {
      param: 'last_reference',
      message: `${model.id} does not take last_reference (a last frame).`,
    });
  }
  if (lasts === 1 && inputs !== 1) {
    throw new GatewayError('invalid_last_reference', {
      param: 'last_reference',
      message: `last_reference goes with exactly one input_reference (the first frame); got ${inputs}.`,
    });
  }
  if (inputs === 0) {
    if (rule.referenceRequired) {
      throw new GatewayError('missing_input_reference', {
        param: 'input_reference',
        message: `${model.id} (${model.family}) needs an input_reference: a starting frame, sent as multipart/form-data.`,
      });
    }
    return { kind: 'none' };
  }
  if (inputs === 1) return { kind: 'frame', lastFrame: lasts === 1, fit: rule.frameFit };
  if (inputs > model.max_references) {
    const takes =
      model.max_references === 0
        ? 'one input_reference (a starting frame)'
        : `up to ${model.max_references} input_reference images`;
    throw new GatewayError('too_many_references', {
      param: 'input_reference',
      message: `${model.id} takes ${takes}; got ${inputs}.`,
    });
  }
  return { kind: 'subjects', count: inputs };
}
