/** multipart/form-data bodies (image edits, video submits with references), read whole within limits. */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { SimError } from './errors.js';

/** The @fastify/multipart plugin, loaded with the first media route. */
export async function multipartPlugin(): Promise<FastifyPluginAsync<{ limits: typeof MULTIPART_LIMITS }>> {
  return (await import('@fastify/multipart')).default as unknown as FastifyPluginAsync<{
    limits: typeof MULTIPART_LIMITS;
  }>;
}

/** One part as @fastify/multipart yields it. */
type Part =
  | { type: 'file'; fieldname: string; filename: string; mimetype: string; toBuffer(): Promise<Buffer> }
  | { type: 'field'; fieldname: string; value: unknown };

/** The request decorations of @fastify/multipart. */
interface MultipartRequest {
  isMultipart(): boolean;
  parts(): AsyncIterableIterator<Part>;
}

/** Whether the request has a multipart/form-data body. */
export function isMultipart(req: FastifyRequest): boolean {
  return (req as unknown as MultipartRequest).isMultipart();
}

/** Limits of @fastify/multipart in the simulator: OpenAI takes image files up to 50 MB. */
export const MULTIPART_LIMITS = {
  fileSize: 50 * 1024 * 1024,
  files: 64,
  fields: 64,
  parts: 256,
  fieldSize: 1024 * 1024,
};

/** All file bytes of one form at most. */
const MAX_FORM_BYTES = 128 * 1024 * 1024;

/** One file part. */
export interface FormFile {
  field: string;
  filename: string;
  mimeType: string;
  bytes: Buffer;
}

/** A form: its text fields (the last value of a repeated one) and its files in order. */
export interface Form {
  fields: Record<string, string>;
  files: FormFile[];
}

/** Reads the whole form of a multipart request. */
export async function readForm(req: FastifyRequest): Promise<Form> {
  const form: Form = { fields: {}, files: [] };
  let total = 0;
  for await (const part of (req as unknown as MultipartRequest).parts()) {
    if (part.type === 'file') {
      const bytes = await part.toBuffer();
      total += bytes.length;
      if (total > MAX_FORM_BYTES) throw new SimError(413, `The files of this request exceed ${MAX_FORM_BYTES} bytes.`);
      form.files.push({ field: part.fieldname, filename: part.filename, mimeType: part.mimetype, bytes });
    } else {
      form.fields[part.fieldname] = String(part.value);
    }
  }
  return form;
}

/** The form as the request log keeps it: the fields, and each file by field, name, type and size. */
export function formSummary(form: Form): Record<string, unknown> {
  return {
    ...form.fields,
    files: form.files.map((f) => ({
      field: f.field,
      filename: f.filename,
      mimeType: f.mimeType,
      size: f.bytes.length,
    })),
  };
}
