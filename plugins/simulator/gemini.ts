/**
 * The Gemini API surface of the simulator: its key check (`x-goog-api-key`, or `?key=`) and its routes,
 * `models/{model}:{method}` dispatched to generateContent (gemini-images.ts) or predictLongRunning,
 * operations and file downloads (gemini-videos.ts). Errors answer `{error:{code,message,status}}`.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { SimError } from './errors.js';
import { generateContent } from './gemini-images.js';
import { downloadFile, getOperation, predictLongRunning } from './gemini-videos.js';
import { type RouteContext, POST_ROUTE } from './route-context.js';

/** A request without a key is refused as the API refuses it: 403 PERMISSION_DENIED. */
export function checkGeminiKey(req: FastifyRequest): void {
  const header = req.headers['x-goog-api-key'];
  const query = (req.query as { key?: unknown }).key;
  if ((typeof header === 'string' && header !== '') || (typeof query === 'string' && query !== '')) return;
  throw new SimError(
    403,
    "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
  );
}

/** Registers the Gemini API routes. */
export function geminiRoutes(app: FastifyInstance, ctx: RouteContext): void {
  // `{model}:{method}` is one path segment; find-my-way cannot route on a literal after a parameter.
  app.post('/v1beta/models/:call', POST_ROUTE, async (req, reply) => {
    ctx.record(req);
    checkGeminiKey(req);
    const call = (req.params as { call: string }).call;
    const at = call.lastIndexOf(':');
    const model = call.slice(0, at);
    const method = call.slice(at + 1);
    if (at > 0 && method === 'generateContent') return generateContent(req, reply, ctx, model);
    if (at > 0 && method === 'predictLongRunning') return predictLongRunning(req, reply, ctx, model);
    throw new SimError(404, `Method not found: models/${call}`);
  });

  app.get('/v1beta/models/:model/operations/:op', async (req, reply) => {
    ctx.record(req);
    checkGeminiKey(req);
    return getOperation(req, reply, ctx);
  });

  app.get('/v1beta/files/:file', async (req, reply) => {
    ctx.record(req);
    checkGeminiKey(req);
    return downloadFile(req, reply, ctx);
  });
}
