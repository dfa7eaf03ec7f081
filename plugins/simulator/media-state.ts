/**
 * What the image and video routes share in one simulator: the log of received reference images, the
 * images served by URL, the video jobs and their renderer.
 */
import type { FastifyRequest } from 'fastify';
import { randomBytes } from 'node:crypto';
import type { ReceivedImage, ReceivedImages } from './received-images.js';
import { VideoJobs } from './video-jobs.js';
import { VideoRenderer } from './video-render.js';

/** Images served by URL (OpenAI `response_format: url`): valid for 60 minutes, as OpenAI documents. */
const BLOB_TTL_MS = 60 * 60 * 1000;
/** URL-served images kept at most; the oldest goes first. */
const MAX_BLOBS = 64;

/** An image served at a capability URL, as the provider serves its signed storage URLs. */
export interface ServedImage {
  bytes: Buffer;
  type: string;
  expiresAt: number;
}

/** Media state of one simulator. */
export class MediaState {
  readonly jobs: VideoJobs;
  private renderer: VideoRenderer | undefined;
  private readonly blobs = new Map<string, ServedImage>();

  constructor(
    /** The received-images log, most recent last (shared with the caller). */
    readonly received: ReceivedImages[],
    private readonly maxRecorded: number,
    videoRenderMs: number,
  ) {
    // The renderer (and its temp directory) exists from the first video job on.
    this.jobs = new VideoJobs(() => (this.renderer ??= new VideoRenderer()), videoRenderMs);
  }

  /** Logs the reference images of a request (none: nothing logged). */
  recordImages(req: FastifyRequest, images: ReceivedImage[]): void {
    if (images.length === 0) return;
    this.received.push({ method: req.method, url: req.url, at: Date.now(), images });
    // Cut back in one step at twice the size, as the request log does.
    if (this.received.length >= 2 * this.maxRecorded) this.received.splice(0, this.received.length - this.maxRecorded);
  }

  /** Stores an image to serve by URL; returns its unguessable name. */
  putBlob(bytes: Buffer, type: string, ext: string): string {
    const name = `img-${randomBytes(18).toString('base64url')}.${ext}`;
    this.blobs.set(name, { bytes, type, expiresAt: Date.now() + BLOB_TTL_MS });
    if (this.blobs.size > MAX_BLOBS) this.blobs.delete(this.blobs.keys().next().value!);
    return name;
  }

  /** A URL-served image, while it has not expired. */
  blob(name: string): ServedImage | undefined {
    const blob = this.blobs.get(name);
    if (blob !== undefined && blob.expiresAt <= Date.now()) {
      this.blobs.delete(name);
      return undefined;
    }
    return blob;
  }

  /** Stops renders and removes rendered clips. */
  close(): Promise<void> {
    return this.renderer?.close() ?? Promise.resolve();
  }
}
