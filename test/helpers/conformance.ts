/**
 * OpenAI's published response schemas (test/fixtures/openai-response-schemas.json; source and version in its $comment) as ajv validators. The file is OpenAPI 3.1 with
 * a few 3.0 `nullable` flags left in; those become `type: [..., "null"]` before compiling.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';

const FILE = new URL('../fixtures/openai-response-schemas.json', import.meta.url);

type Schema = Record<string, unknown>;

function fixNullable(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(fixNullable);
  if (!node || typeof node !== 'object') return node;
  const out: Schema = {};
  for (const [k, v] of Object.entries(node as Schema)) out[k] = fixNullable(v);
  if (out.nullable === true) {
    delete out.nullable;
    if (Array.isArray(out.enum)) out.enum = [...(out.enum as unknown[]), null];
    if (typeof out.type === 'string') out.type = [out.type, 'null'];
    else if (Array.isArray(out.type)) out.type = [...new Set([...(out.type as string[]), 'null'])];
    else if (!out.enum) return { anyOf: [out, { type: 'null' }] };
  }
  return out;
}

let ajv: Ajv2020 | undefined;

/** A validator for one component schema, e.g. 'CreateChatCompletionResponse'. */
export function validator(name: string): (data: unknown) => string[] {
  if (!ajv) {
    const doc = fixNullable(JSON.parse(readFileSync(FILE, 'utf8'))) as {
      components: { schemas: Record<string, Schema> };
    };
    ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    ajv.addSchema({ $id: 'openai', components: doc.components });
  }
  const validate = ajv.getSchema(`openai#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name}`);
  return (data) => (validate(data) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`));
}
