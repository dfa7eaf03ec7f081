/**
 * GET /v1/models and GET /v1/models/{id}: the models the calling key may use, where each is served and what it costs.
 * Plain authenticated routes outside the call path (no hold, no bill, nothing read beyond the key).
 *
 * The shape is the caller's protocol's: OpenAI's list by default, which the `openai` SDK's models.list() and
 * models.retrieve() read; Anthropic's when the request carries `anthropic-version` (its SDKs send it on every request),
 * paged by `limit`, `after_id` and `before_id` as @anthropic-ai/sdk's models.list() pages. Errors take the same
 * protocol's shape. Every entry also carries `farebox`: kind, endpoints, limits of a text model, and prices as USD
 * strings of at least 6 decimals from pricing/publish.ts, the numbers of `farebox prices` and the dashboard.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { KeyIdentity } from '../accounts/accounts.js';
import { modelAllowed } from '../accounts/key-limits.js';
import type { Endpoint, EndpointName } from '../call.js';
import type { OnRequestHook } from '../phases/identify.js';
import { protocolOfCaller } from '../intake/protocol.js';
import type { CatalogEndpoint, ModelCatalog, ModelConfig } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import {
  lookupRates,
  publishedRates,
  type ImagePrices,
  type PriceTable,
  type TextPrices,
  type VideoPrices,
} from '../../pricing/index.js';

/** What the routes use. */
export interface ModelsRoutesContext {
  /** Identify's key check (phases/identify.ts authenticate). */
  readonly authenticate: OnRequestHook;
  readonly catalog: ModelCatalog;
  /** The served models (config `models`), in the order they are listed. */
  readonly models: readonly ModelConfig[];
  readonly prices: PriceTable;
  /** The endpoint modules (routes/index.ts ENDPOINTS), whose paths an entry names. */
  readonly endpoints: readonly Endpoint[];
}

/** What an entry says of its model beyond its protocol's fields. */
export interface FareboxModelInfo {
  readonly kind: ModelConfig['kind'];
  /** The paths that serve the model, such as `/v1/messages`. */
  readonly endpoints: readonly string[];
  /** Text: the most input tokens the model takes. */
  readonly context_window?: number;
  /** Text: the most output tokens of one call (a larger max_tokens is clamped to it). */
  readonly max_output_tokens?: number;
  /** USD: text per 1,000,000 tokens, images per image by size, video per clip by duration in seconds. */
  readonly pricing: TextPrices | ImagePrices | VideoPrices;
}

/** One served model as listed. */
export interface ListedModel {
  readonly id: string;
  readonly farebox: FareboxModelInfo;
}

/**
 * `created` (OpenAI, Unix seconds) and `created_at` (Anthropic) of every model: the Unix epoch, which Anthropic's
 * Models API gives a model whose release date it does not know. The config names no release date, and a time of this
 * process (its start, its config's load) would differ between the instances and the restarts of one gateway.
 */
const CREATED = 0;
const CREATED_AT = '1970-01-01T00:00:00Z';

/** OpenAI's `owned_by`: the gateway serves the model; the provider behind it is the operator's own business. */
const OWNED_BY = 'farebox';

/** The catalogue endpoint each endpoint module routes its models on (its police: catalog.route). */
const ROUTED_ON: Readonly<Record<EndpointName, CatalogEndpoint>> = {
  messages: 'messages',
  count_tokens: 'count_tokens',
  chat_completions: 'chat_completions',
  image_generations: 'images',
  image_edits: 'images',
  videos: 'videos',
};

/** Every served model as listed, in the config's order: its endpoints from the catalogue, its prices published. */
export function listModels(
  ctx: Pick<ModelsRoutesContext, 'catalog' | 'models' | 'prices' | 'endpoints'>,
): ListedModel[] {
  return ctx.models.map((model) => {
    const served = ctx.catalog.endpointsOf(model.id);
    const endpoints = ctx.endpoints.filter((e) => served.includes(ROUTED_ON[e.name])).map((e) => `/v1${e.path}`);
    const pricing = publishedRates(lookupRates(ctx.prices, model.id), 6);
    const farebox: FareboxModelInfo =
      model.kind === 'text'
        ? {
            kind: model.kind,
            endpoints,
            context_window: model.context_window,
            max_output_tokens: model.max_tokens,
            pricing,
          }
        : { kind: model.kind, endpoints, pricing };
    return { id: model.id, farebox };
  });
}

/** Whether the key may use the model `id`: what a key sees listed is what its allow-list lets it call. */
export function visibleTo(identity: KeyIdentity, id: string): boolean {
  return modelAllowed(identity.models, id);
}

function openaiModel(m: ListedModel) {
  return { id: m.id, object: 'model', created: CREATED, owned_by: OWNED_BY, farebox: m.farebox };
}

function anthropicModel(m: ListedModel) {
  return { type: 'model', id: m.id, display_name: m.id, created_at: CREATED_AT, farebox: m.farebox };
}

const LIMIT = /^[1-9]\d{0,3}$/;

/** A query parameter given once, else undefined; twice is a 400. */
function single(query: Record<string, unknown>, name: string): string | undefined {
  const v = query[name];
  if (v === undefined || typeof v === 'string') return v;
  throw new GatewayError('invalid_request', { param: name, message: `${name} must be given once.` });
}

/**
 * One page of Anthropic's list: `limit` models (1 to 1000, default 20) from the start, after `after_id`, or before
 * `before_id`; `has_more` says whether more lie in the page's direction, `first_id` and `last_id` are its cursors.
 * A cursor that names no listed model is a 400.
 */
export function anthropicPage(models: readonly ListedModel[], query: Record<string, unknown>) {
  const limitText = single(query, 'limit');
  const limit = limitText === undefined ? 20 : LIMIT.test(limitText) ? Number(limitText) : 0;
  if (limit < 1 || limit > 1000)
    throw new GatewayError('invalid_request', {
      param: 'limit',
      message: 'limit must be a whole number from 1 to 1000.',
    });
  const after = single(query, 'after_id');
  const before = single(query, 'before_id');
  if (after !== undefined && before !== undefined)
    throw new GatewayError('invalid_request', { param: 'before_id', message: 'Send after_id or before_id, not both.' });
  const at = (name: string, id: string) => {
    const i = models.findIndex((m) => m.id === id);
    if (i < 0)
      throw new GatewayError('invalid_request', {
        param: name,
        message: `${name} ${JSON.stringify(id.slice(0, 120))} names no listed model.`,
      });
    return i;
  };
  let start = 0;
  let end = Math.min(limit, models.length);
  if (after !== undefined) {
    start = at('after_id', after) + 1;
    end = Math.min(start + limit, models.length);
  } else if (before !== undefined) {
    end = at('before_id', before);
    start = Math.max(0, end - limit);
  }
  const data = models.slice(start, end);
  return {
    data: data.map(anthropicModel),
    has_more: before !== undefined ? start > 0 : end < models.length,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
  };
}

function send(reply: FastifyReply, body: unknown): FastifyReply {
  return reply.type('application/json').send(JSON.stringify(body));
}

/** Register the models routes in the gateway's /v1 context. */
export function modelsRoutes(v1: FastifyInstance, ctx: ModelsRoutesContext): void {
  // Built once: the catalogue and the prices do not change while the gateway runs.
  const listed = listModels(ctx);
  const byId = new Map(listed.map((m) => [m.id, m]));
  const visible = (request: FastifyRequest) => listed.filter((m) => visibleTo(request.farebox.identity!, m.id));
  const opts = { config: { protocolOf: protocolOfCaller }, onRequest: ctx.authenticate };
  v1.get('/models', opts, async (request, reply) => {
    const models = visible(request);
    if (request.farebox.protocol === 'anthropic')
      return send(reply, anthropicPage(models, request.query as Record<string, unknown>));
    return send(reply, { object: 'list', data: models.map(openaiModel) });
  });
  v1.get('/models/:id', opts, async (request, reply) => {
    const { id } = request.params as { id: string };
    const model = byId.get(id);
    if (model === undefined || !visibleTo(request.farebox.identity!, id)) {
      throw new GatewayError('model_not_found', {
        param: 'model',
        message: `No model with id ${JSON.stringify(id.slice(0, 120))}.`,
      });
    }
    return send(reply, request.farebox.protocol === 'anthropic' ? anthropicModel(model) : openaiModel(model));
  });
}
