/**
 * The model catalogue: the provider and model schemas of the config, and which model is served on which endpoint by
 * which provider (the endpoints a provider serves, and the URL of each route, are its protocol's:
 * plugins/upstream/protocols/). SPEC: the messages endpoint serves alpha models; chat completions serves alpha, beta
 * and gamma; the image endpoints serve img models; the video endpoints serve vidA, vidB and vidC models.
 */
import { z } from 'zod';
import { IMAGE_SIZES } from '../pricing/index.js';
import { GatewayError } from './errors.js';
import { REASONING_SCALE } from './families.js';
import { ASPECT_RATIOS } from './image-request.js';

/** A provider account the operator fronts: the API family it speaks, where, and the env var holding its key. */
export const providerSchema = z.strictObject({
  /**
   * The provider's API: the name of a provider protocol (plugins/upstream/protocols/registry.ts), checked against
   * the registry where the config is read (plugins/config.ts). A model's kind picks the API of the family.
   */
  protocol: z.string().min(1),
  /** Anthropic: origin without /v1 (https://api.anthropic.com); OpenAI: API base with /v1; Gemini: base with /v1beta. */
  base_url: z.url({ protocol: /^https?$/ }).transform((u) => u.replace(/\/+$/, '')),
  /** Name of the environment variable holding the operator's provider key. */
  key_env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'an environment variable name'),
  /** Longest wait for the provider's answer to start, and longest silence inside it. */
  timeout_ms: z.number().int().positive().default(600_000),
  /**
   * Longest a call may run, first byte to last, whatever its pace (a slow model, a caller that stops reading): the
   * gateway then cuts it and bills what was delivered. One hour by default: 128,000 output tokens at 40 a second.
   */
  max_duration_ms: z.number().int().positive().default(3_600_000),
  /** OpenAI protocol: the output-limit field the provider reads. */
  max_tokens_field: z.enum(['max_tokens', 'max_completion_tokens']).default('max_completion_tokens'),
});

const TEXT_FAMILIES = ['alpha', 'beta', 'gamma'] as const;
const VIDEO_FAMILIES = ['vidA', 'vidB', 'vidC'] as const;

const common = {
  id: z.string().min(1),
  /** Provider of the model's native protocol (Anthropic for alpha on /v1/messages). */
  provider: z.string().min(1),
  /** The provider's own id for the model; defaults to `id`. */
  upstream_model: z.string().min(1).optional(),
};

const textModelSchema = z.strictObject({
  kind: z.literal('text'),
  ...common,
  family: z.enum(TEXT_FAMILIES),
  /** Provider for /v1/chat/completions when it differs (an OpenAI-compatible endpoint). */
  chat_provider: z.string().min(1).optional(),
  /** Output-token ceiling: larger max_tokens are clamped to it. */
  max_tokens: z.number().int().positive().default(32_000),
  /** Most input tokens the model takes: bounds the input side of the worst-case price. */
  context_window: z.number().int().positive().default(200_000),
  /** Whether the model still accepts `temperature`; when false it is removed. */
  temperature: z.boolean().default(true),
  /** Reasoning levels the upstream supports; requested levels map to the nearest of these. */
  reasoning_levels: z.array(z.enum(REASONING_SCALE)).default([]),
  /** The most input tokens one inline image costs on the model (default by family, policies/text-bounds.ts). */
  max_image_tokens: z.number().int().positive().optional(),
});

const imageModelSchema = z.strictObject({
  kind: z.literal('image'),
  ...common,
  family: z.literal('img'),
  /**
   * Size classes the upstream renders (a request for another is a 400, never a smaller image at a larger price);
   * absent: what the provider documents for the upstream model (its protocol's image adapter, `capabilities`).
   */
  sizes: z.array(z.enum(IMAGE_SIZES)).min(1).optional(),
  /** Aspect ratios the upstream renders; absent: as documented for the upstream model. */
  aspect_ratios: z.array(z.enum(ASPECT_RATIOS)).min(1).optional(),
  /**
   * OpenAI Images: the `quality` sent on every call, which the model's price must cover (output tokens grow about
   * 15x from low to high); a caller may send only this value or `auto`. Absent: medium on GPT image models,
   * standard on dall-e-3, none on dall-e-2.
   */
  quality: z.enum(['low', 'medium', 'high', 'standard', 'hd']).optional(),
  /** OpenAI Images edits: the `input_fidelity` sent (high costs more input tokens); absent: not sent (low). */
  input_fidelity: z.enum(['low', 'high']).optional(),
  /**
   * Gemini: `generationConfig.maxOutputTokens` of every call: the image's tokens (1,120 at 1K and 2K, 2,000 at 4K
   * on Gemini 3 Pro Image) and the model's thinking, which bill as output. A model stopped by it makes no image
   * (free to the caller): keep it above what the model needs. Absent: 8,192.
   */
  max_output_tokens: z.number().int().positive().optional(),
  /** Whether callers' safety settings (OpenAI `moderation`, Gemini `safetySettings`) reach the provider; else dropped. */
  caller_safety: z.boolean().default(false),
});

const videoModelSchema = z
  .strictObject({
    kind: z.literal('video'),
    ...common,
    /** The family decides sizes, durations and references (SPEC "Sizes and durations per family"). */
    family: z.enum(VIDEO_FAMILIES),
    /** Subject/style references the model takes (two or more input_reference files); 0 = a starting frame only. */
    max_references: z.number().int().min(0).max(30).default(0),
    /** Whether the model takes last_reference (first-plus-last-frame animation). */
    last_reference: z.boolean().default(false),
  })
  .superRefine((m, ctx) => {
    // SPEC: subject references and a last frame are vidB's (vidB-2.5); vidA and vidC take one starting frame at most.
    if (m.family === 'vidB') return;
    if (m.max_references > 0)
      ctx.addIssue({
        code: 'custom',
        path: ['max_references'],
        message: `must be 0 for family ${m.family}: only vidB models take subject references`,
      });
    if (m.last_reference)
      ctx.addIssue({
        code: 'custom',
        path: ['last_reference'],
        message: `must be false for family ${m.family}: only vidB models take a last frame`,
      });
  });

const KIND_OF_FAMILY: Record<string, 'text' | 'image' | 'video'> = {
  alpha: 'text',
  beta: 'text',
  gamma: 'text',
  img: 'image',
  vidA: 'video',
  vidB: 'video',
  vidC: 'video',
};

/** One served model: a union by `kind`, which defaults from the family (alpha/beta/gamma text, img image, vid* video). */
export const modelSchema = z.preprocess(
  (m) => {
    if (m && typeof m === 'object' && !Array.isArray(m) && !('kind' in m)) {
      // An unknown or missing family is reported as such, under the text schema's family field.
      const family = (m as { family?: unknown }).family;
      return { kind: (typeof family === 'string' && KIND_OF_FAMILY[family]) || 'text', ...m };
    }
    return m;
  },
  z.discriminatedUnion('kind', [textModelSchema, imageModelSchema, videoModelSchema], {
    error: 'kind must be text, image or video',
  }),
);

/** One provider of the config, with its key resolved from the environment. */
export type ProviderConfig = z.output<typeof providerSchema> & { readonly name: string; readonly key: string };
/** One served model. */
export type ModelConfig = z.output<typeof modelSchema>;
/** A text model. */
export type TextModel = z.output<typeof textModelSchema>;
/** An image model. */
export type ImageModel = z.output<typeof imageModelSchema>;
/** A video model. */
export type VideoModel = z.output<typeof videoModelSchema>;

/** The endpoint families a model can be called on. */
export type CatalogEndpoint = 'messages' | 'count_tokens' | 'chat_completions' | 'images' | 'videos';

/** The kind of model each endpoint serves: a protocol serving an endpoint serves models of its kind. */
export const ENDPOINT_KIND: Readonly<Record<CatalogEndpoint, ModelConfig['kind']>> = {
  messages: 'text',
  count_tokens: 'text',
  chat_completions: 'text',
  images: 'image',
  videos: 'video',
};

/** Where one call on one endpoint goes. */
export interface ModelRoute<M extends ModelConfig = ModelConfig> {
  readonly model: M;
  readonly provider: ProviderConfig;
  readonly upstreamModel: string;
  /**
   * The upstream URL of the endpoint, from the provider's protocol (images and videos: the create call; their
   * adapters derive the others).
   */
  readonly url: string;
}

/**
 * What the catalogue asks of the providers' protocols (plugins/upstream/protocols/registry.ts catalogUpstream): the
 * endpoints a provider serves, and the upstream URL of `endpoint` for a model on it.
 */
export interface CatalogUpstream {
  serves(provider: ProviderConfig): readonly CatalogEndpoint[];
  url(provider: ProviderConfig, endpoint: CatalogEndpoint, upstreamModel: string): string;
}

const EVERY_ENDPOINT = Object.freeze(Object.keys(ENDPOINT_KIND) as CatalogEndpoint[]);

/**
 * A catalogue that polices and prices, never forwards: every provider taken to serve every endpoint of its models
 * (so a text model is on chat completions through its chat provider), each route's url ''.
 */
const POLICING_ONLY: CatalogUpstream = { serves: () => EVERY_ENDPOINT, url: () => '' };

/** Resolves a model id on an endpoint to its route, from a table built once from the config. */
export class ModelCatalog {
  private readonly routes = new Map<string, ModelRoute>();
  private readonly known = new Set<string>();

  /** `upstream`: the protocols' endpoints and URLs; absent, a catalogue that polices and prices (POLICING_ONLY). */
  constructor(
    config: { readonly providers: Readonly<Record<string, ProviderConfig>>; readonly models: readonly ModelConfig[] },
    upstream: CatalogUpstream = POLICING_ONLY,
  ) {
    for (const model of config.models) {
      this.known.add(model.id);
      const upstreamModel = model.upstream_model ?? model.id;
      const native = config.providers[model.provider];
      // A route where the provider's protocol serves the endpoint (the config's check: at least one of its kind's).
      const add = (endpoint: CatalogEndpoint, provider: ProviderConfig) => {
        if (!upstream.serves(provider).includes(endpoint)) return;
        this.routes.set(`${endpoint}\0${model.id}`, {
          model,
          provider,
          upstreamModel,
          url: upstream.url(provider, endpoint, upstreamModel),
        });
      };
      if (model.kind === 'image') {
        add('images', native);
      } else if (model.kind === 'video') {
        add('videos', native);
      } else {
        if (model.family === 'alpha') {
          add('messages', native);
          add('count_tokens', native);
        }
        add('chat_completions', config.providers[model.chat_provider ?? model.provider]);
      }
    }
  }

  /** The endpoints `modelId` is served on, in ENDPOINT_KIND's order; none for a model the config does not serve. */
  endpointsOf(modelId: string): CatalogEndpoint[] {
    return EVERY_ENDPOINT.filter((e) => this.routes.has(`${e}\0${modelId}`));
  }

  /** The route of `modelId` on `endpoint`; 400 unknown_model or wrong_endpoint otherwise. */
  route(endpoint: CatalogEndpoint, modelId: string): ModelRoute {
    const r = this.routes.get(`${endpoint}\0${modelId}`);
    if (r) return r;
    if (this.known.has(modelId)) {
      throw new GatewayError('wrong_endpoint', {
        param: 'model',
        message: `The model ${modelId} is not served on this endpoint.`,
      });
    }
    throw new GatewayError('unknown_model', {
      param: 'model',
      message: `Unknown model: ${JSON.stringify(modelId).slice(0, 120)}. Model ids must be copied exactly.`,
    });
  }
}
