// The price table: USD decimal strings at the edges (config, `farebox prices --json`), exact bigint rates inside.
// Billing units follow SPEC.md "What the service does" (6) and DESIGN.md "Money".
import { z } from 'zod';
import { USD_DECIMALS, parseUsd } from './money.js';

/** Image resolutions of SPEC.md "Image generation request". */
export const IMAGE_SIZES = ['1K', '2K', '4K'] as const;

/** An image resolution. */
export type ImageSize = (typeof IMAGE_SIZES)[number];

/** Clip durations in seconds each video family allows (SPEC.md "Sizes and durations per family"). */
export const VIDEO_DURATIONS = {
  vidA: [4, 8, 12],
  vidB: [5, 8, 12, 16, 20, 24, 30],
  vidC: [5, 8],
} as const satisfies Record<string, readonly number[]>;

/** A video model family. */
export type VideoFamily = keyof typeof VIDEO_DURATIONS;

/** Tokens one text rate is quoted for: rates are USD per 1,000,000 tokens. */
export const RATE_TOKENS = 1_000_000n;

/** Text rates in atomic units per RATE_TOKENS tokens; cache writes derive from input (1.25x, 2x). */
export interface TextRates {
  readonly kind: 'text';
  readonly input: bigint;
  readonly output: bigint;
  readonly cacheRead: bigint;
}

/** Atomic units per delivered image, by size. */
export interface ImageRates {
  readonly kind: 'image';
  readonly perImage: Readonly<Record<ImageSize, bigint>>;
}

/** Atomic units per delivered clip, keyed by duration in seconds (exactly the family's durations). */
export interface VideoRates {
  readonly kind: 'video';
  readonly family: VideoFamily;
  readonly perClip: Readonly<Record<string, bigint>>;
}

/** The rates of one model. */
export type ModelRates = TextRates | ImageRates | VideoRates;

/** Validated, frozen rates of every priced model, keyed by model id. */
export type PriceTable = Readonly<Record<string, ModelRates>>;

/** The `farebox prices --json` document: USD decimal strings, text per 1,000,000 tokens. */
export interface PricesDocument {
  text: Record<string, { input: string; output: string; cache_read: string }>;
  image: Record<string, Record<ImageSize, string>>;
  video: Record<string, Record<string, string>>;
}

/** Thrown by buildPriceTable; `path` names the offending config field (e.g. "prices.text.alpha-haiku-4-5.input"). */
export class PriceTableError extends Error {
  override name = 'PriceTableError';
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}

/** Default prices of the embedded catalog (frozen); cache reads are 0.1x input for alpha, per provider for the others. */
export const DEFAULT_PRICES: PricesDocument = deepFreeze({
  text: {
    'alpha-fable-5': { input: '15.00', output: '75.00', cache_read: '1.50' },
    'alpha-haiku-4-5': { input: '1.00', output: '5.00', cache_read: '0.10' },
    'alpha-opus-4-6': { input: '5.00', output: '25.00', cache_read: '0.50' },
    'alpha-opus-4-7': { input: '5.00', output: '25.00', cache_read: '0.50' },
    'alpha-opus-4-8': { input: '5.00', output: '25.00', cache_read: '0.50' },
    'alpha-opus-5': { input: '5.00', output: '25.00', cache_read: '0.50' },
    'alpha-sonnet-4-6': { input: '3.00', output: '15.00', cache_read: '0.30' },
    'alpha-sonnet-5': { input: '3.00', output: '15.00', cache_read: '0.30' },
    'beta-5.6-sol': { input: '1.75', output: '14.00', cache_read: '0.175' },
    'beta-5.6-mini': { input: '0.25', output: '2.00', cache_read: '0.025' },
    'beta-5.5': { input: '1.25', output: '10.00', cache_read: '0.125' },
    'gamma-k3': { input: '0.60', output: '2.50', cache_read: '0.15' },
    'gamma-q3': { input: '0.30', output: '1.20', cache_read: '0.075' },
  },
  image: {
    'img-pro': { '1K': '0.134', '2K': '0.134', '4K': '0.24' },
    'img-2': { '1K': '0.039', '2K': '0.067', '4K': '0.12' },
  },
  video: {
    'vidA-v6': { '4': '0.40', '8': '0.80', '12': '1.20' },
    'vidB-2.5': { '5': '0.35', '8': '0.56', '12': '0.84', '16': '1.12', '20': '1.40', '24': '1.68', '30': '2.10' },
    'vidB-2.1': { '5': '0.25', '8': '0.40', '12': '0.60', '16': '0.80', '20': '1.00', '24': '1.20', '30': '1.50' },
    'vidC-3': { '5': '0.60', '8': '0.96' },
  },
});

function deepFreeze<T extends object>(o: T): T {
  for (const v of Object.values(o)) if (typeof v === 'object' && v !== null) deepFreeze(v);
  return Object.freeze(o);
}

const usd = z
  .string()
  .regex(/^\d+(\.\d+)?$/, 'expected a non-negative USD decimal string such as "3.00"')
  .refine((s) => (s.split('.')[1] ?? '').length <= USD_DECIMALS, `at most ${USD_DECIMALS} decimals`);
const modelId = z.string().min(1, 'model id must not be empty');

/**
 * Zod schema of the `prices` config section: partial overrides in the shape of `farebox prices --json`
 * ({text,image,video} -> model id -> field -> USD decimal string). A model absent from the defaults must be complete.
 */
export const pricesConfigSchema = z.strictObject({
  text: z
    .record(modelId, z.strictObject({ input: usd.optional(), output: usd.optional(), cache_read: usd.optional() }))
    .optional(),
  image: z
    .record(modelId, z.strictObject({ '1K': usd.optional(), '2K': usd.optional(), '4K': usd.optional() }))
    .optional(),
  video: z.record(modelId, z.record(z.string().regex(/^[1-9]\d*$/, 'expected whole seconds'), usd)).optional(),
});

/** The parsed `prices` config section. */
export type PricesConfig = z.infer<typeof pricesConfigSchema>;

type Kind = keyof PricesDocument;
const KINDS: readonly Kind[] = ['text', 'image', 'video'];
const TEXT_FIELDS = ['input', 'output', 'cache_read'] as const;

/** Whether `family` is a video family of VIDEO_DURATIONS. */
export function isVideoFamily(family: string): family is VideoFamily {
  return Object.hasOwn(VIDEO_DURATIONS, family);
}

/**
 * Video family of a model id: the family its config gives it (`families`), else the id's prefix (the spec's ids:
 * vidA-*, vidB-*, vidC-*), so an operator's model of a family is priced by that family's durations whatever its id.
 */
function videoFamily(id: string, families: Readonly<Record<string, string>>): VideoFamily | undefined {
  const family = Object.hasOwn(families, id) ? families[id]! : id.split('-')[0]!;
  return isVideoFamily(family) ? family : undefined;
}

/** Parses one USD string of the merged document, naming the field on error. */
function rate(path: string, s: string | undefined): bigint {
  if (s === undefined) throw new PriceTableError(path, 'missing (required for a model without a default price)');
  try {
    return parseUsd(s);
  } catch (err) {
    throw new PriceTableError(path, (err as Error).message);
  }
}

function buildText(path: string, fields: Partial<Record<(typeof TEXT_FIELDS)[number], string>>): TextRates {
  return Object.freeze({
    kind: 'text',
    input: rate(`${path}.input`, fields.input),
    output: rate(`${path}.output`, fields.output),
    cacheRead: rate(`${path}.cache_read`, fields.cache_read),
  });
}

function buildImage(path: string, fields: Partial<Record<ImageSize, string>>): ImageRates {
  const perImage = {} as Record<ImageSize, bigint>;
  for (const size of IMAGE_SIZES) perImage[size] = rate(`${path}.${size}`, fields[size]);
  return Object.freeze({ kind: 'image', perImage: Object.freeze(perImage) });
}

function buildVideo(
  path: string,
  id: string,
  fields: Record<string, string>,
  families: Readonly<Record<string, string>>,
): VideoRates {
  const family = videoFamily(id, families);
  if (family === undefined) {
    throw new PriceTableError(
      path,
      `unknown video family; give the model a family (${Object.keys(VIDEO_DURATIONS).join(', ')}) in models, or an id that starts with one`,
    );
  }
  const allowed: readonly number[] = VIDEO_DURATIONS[family];
  for (const key of Object.keys(fields)) {
    if (!allowed.includes(Number(key))) {
      throw new PriceTableError(`${path}.${key}`, `${family} clips last ${allowed.join(', ')} seconds only`);
    }
  }
  const perClip: Record<string, bigint> = {};
  for (const s of allowed) perClip[String(s)] = rate(`${path}.${s}`, fields[String(s)]);
  return Object.freeze({ kind: 'video', family, perClip: Object.freeze(perClip) });
}

/**
 * Merges config overrides onto DEFAULT_PRICES, validates and freezes the result.
 * Each override field replaces only itself. Throws PriceTableError naming the field: bad decimals, a model listed
 * under the wrong kind (or under two), an unknown video family, a duration the family does not allow, missing fields.
 * `configPath` is the section's name in those paths. `families` maps a video model id to the family its config gives
 * it (config `models`); ids it does not name take the family of their prefix.
 */
export function buildPriceTable(
  overrides: unknown = {},
  configPath = 'prices',
  families: Readonly<Record<string, string>> = {},
): PriceTable {
  const parsed = pricesConfigSchema.safeParse(overrides ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const at = [configPath, ...issue.path.map(String)].join('.');
    // A bad record key reports only "Invalid key in record"; its own issue says why.
    const reason =
      issue.code === 'invalid_key' ? `invalid key: ${issue.issues[0]?.message ?? issue.message}` : issue.message;
    throw new PriceTableError(at, reason);
  }
  const kindOf = new Map<string, Kind>();
  const merged: Record<string, Record<string, string>> = Object.create(null);
  for (const kind of KINDS) {
    for (const [id, fields] of Object.entries(DEFAULT_PRICES[kind])) {
      kindOf.set(id, kind);
      merged[id] = { ...fields };
    }
  }
  const defaultKindOf = new Map(kindOf);
  for (const kind of KINDS) {
    for (const [id, fields] of Object.entries(parsed.data[kind] ?? {})) {
      const known = kindOf.get(id);
      if (known !== undefined && known !== kind) {
        const why = defaultKindOf.has(id)
          ? `${id} is priced as ${known}, not ${kind}`
          : `${id} is also listed under ${known}`;
        throw new PriceTableError(`${configPath}.${kind}.${id}`, why);
      }
      kindOf.set(id, kind);
      merged[id] = { ...merged[id], ...(fields as Record<string, string>) };
    }
  }
  const table: Record<string, ModelRates> = Object.create(null);
  for (const [id, kind] of kindOf) {
    const path = `${configPath}.${kind}.${id}`;
    const fields = merged[id]!;
    table[id] =
      kind === 'text'
        ? buildText(path, fields)
        : kind === 'image'
          ? buildImage(path, fields)
          : buildVideo(path, id, fields, families);
  }
  return Object.freeze(table);
}

/** The price table of the embedded default (no overrides). */
export const DEFAULT_PRICE_TABLE: PriceTable = buildPriceTable({});

/** The rates of a model; an unknown model throws, as the policy layer resolves models before pricing. */
export function lookupRates(table: PriceTable, id: string): ModelRates {
  if (!Object.hasOwn(table, id)) throw new Error(`no price for model ${JSON.stringify(id)}`);
  return table[id]!;
}
