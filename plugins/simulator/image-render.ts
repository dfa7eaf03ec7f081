/**
 * The simulated image models' pictures: a gradient and a few shapes drawn from a seed (so the prompt
 * decides them), rendered by sharp from SVG at exactly the asked size, kept in a small LRU cache.
 *
 * Speed: librsvg draws the scene and PNG is written with zlib level 1 and no adaptive filtering.
 * Measured on the project's 2-core VM (shared, load average 8-10): a 4096x4096 PNG in 0.2-0.25 s at
 * best and 0.35-0.7 s at worst, librsvg ~85% of it (6336x2688 the same); 1024x1024 in ~25 ms; a cache
 * hit in microseconds. Drawing at a quarter size and upscaling saved nothing; zlib level 3 saved a
 * third of the bytes for +10% time.
 */
import { loadSharp } from './media-libs.js';
import { hashSeed } from './tokens.js';

/** Encodings the simulated providers answer in. */
export type ImageFormat = 'png' | 'jpeg' | 'webp';

/** MIME type of each encoding. */
export const IMAGE_MIME: Record<ImageFormat, string> = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' };

/** What to draw and how to encode it. */
export interface ImageSpec {
  width: number;
  height: number;
  seed: number;
  format: ImageFormat;
  /** A transparent margin around the scene (RGBA); otherwise the image is opaque RGB. */
  alpha: boolean;
  /** JPEG and WebP quality, 1-100 (default 80). */
  quality?: number;
  /** Grain over the scene, so the image compresses as a photograph does rather than as a flat drawing. */
  detailed?: boolean;
}

/** The seed of the `index`-th image of a prompt. */
export function imageSeed(prompt: string, index = 0): number {
  return (hashSeed(prompt) + Math.imul(index, 0x9e3779b1)) >>> 0;
}

/** mulberry32 (as tokens.ts): deterministic floats in [0, 1). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The scene as SVG: a two-colour linear gradient, a radial-gradient disc, and seven circles, bars and triangles. */
export function sceneSvg(width: number, height: number, seed: number, alpha: boolean): string {
  const r = random(seed);
  const hue = () => Math.floor(r() * 360);
  const m = Math.min(width, height);
  let s =
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"><defs>` +
    `<linearGradient id="g" x1="0" y1="0" x2="${r().toFixed(3)}" y2="1">` +
    `<stop offset="0" stop-color="hsl(${hue()},70%,30%)"/><stop offset="1" stop-color="hsl(${hue()},80%,68%)"/></linearGradient>` +
    `<radialGradient id="r"><stop offset="0" stop-color="hsl(${hue()},90%,72%)"/><stop offset="1" stop-color="hsl(${hue()},60%,28%)"/></radialGradient></defs>`;
  s += alpha
    ? `<rect x="${Math.round(width * 0.06)}" y="${Math.round(height * 0.06)}" width="${Math.round(width * 0.88)}" height="${Math.round(height * 0.88)}" rx="${Math.round(m * 0.08)}" fill="url(#g)"/>`
    : `<rect width="${width}" height="${height}" fill="url(#g)"/>`;
  for (let i = 0; i < 8; i++) {
    const x = Math.round(r() * width);
    const y = Math.round(r() * height);
    const size = Math.round(m * (0.06 + r() * 0.22));
    const fill = i === 0 ? 'url(#r)' : `hsl(${hue()},75%,${35 + Math.floor(r() * 35)}%)`;
    const opacity = (0.55 + r() * 0.45).toFixed(2);
    switch (i % 3) {
      case 0:
        s += `<circle cx="${x}" cy="${y}" r="${size}" fill="${fill}" fill-opacity="${opacity}"/>`;
        break;
      case 1:
        s += `<rect x="${x}" y="${y}" width="${Math.round(size * 1.7)}" height="${size}" fill="${fill}" fill-opacity="${opacity}" transform="rotate(${Math.floor(r() * 90)} ${x} ${y})"/>`;
        break;
      default:
        s += `<polygon points="${x},${y - size} ${x + size},${y + size} ${x - size},${y + size}" fill="${fill}" fill-opacity="${opacity}"/>`;
    }
  }
  return s + '</svg>';
}

/** The scene's pixels with the low five bits of every channel drawn from the seed: about as much entropy as a photo's. */
async function grainy(spec: ImageSpec): Promise<{ data: Buffer; channels: 3 | 4 }> {
  const sharp = await loadSharp();
  const scene = sharp(Buffer.from(sceneSvg(spec.width, spec.height, spec.seed, spec.alpha)));
  const { data, info } = await (spec.alpha ? scene : scene.removeAlpha()).raw().toBuffer({ resolveWithObject: true });
  const r = random(spec.seed ^ 0x5bd1e995);
  const words = new Uint32Array(data.buffer, data.byteOffset, Math.floor(data.length / 4));
  for (let i = 0; i < words.length; i++) words[i] = (words[i]! & 0xe0e0e0e0) | ((r() * 4294967296) & 0x1f1f1f1f);
  return { data, channels: info.channels as 3 | 4 };
}

async function encode(spec: ImageSpec): Promise<Buffer> {
  const sharp = await loadSharp();
  const quality = spec.quality ?? 80;
  // librsvg always renders RGBA; an opaque image drops the channel so it decodes as RGB, as providers send it.
  let img = sharp(Buffer.from(sceneSvg(spec.width, spec.height, spec.seed, spec.alpha)));
  if (spec.detailed) {
    const { data, channels } = await grainy(spec);
    img = sharp(data, { raw: { width: spec.width, height: spec.height, channels } });
  }
  switch (spec.format) {
    case 'png':
      return (spec.alpha ? img : img.removeAlpha()).png({ compressionLevel: 1, adaptiveFiltering: false }).toBuffer();
    case 'jpeg':
      return img.flatten({ background: '#ffffff' }).jpeg({ quality }).toBuffer();
    case 'webp':
      return (spec.alpha ? img : img.removeAlpha()).webp({ quality, effort: 0 }).toBuffer();
  }
}

const MAX_ENTRIES = 32;
const MAX_BYTES = 192 * 1024 * 1024;
/** Finished renders, least recently used first. */
const done = new Map<string, Buffer>();
/** Renders under way, so concurrent asks for one image render it once. */
const pending = new Map<string, Promise<Buffer>>();
let cachedBytes = 0;

function keep(key: string, bytes: Buffer): void {
  done.set(key, bytes);
  cachedBytes += bytes.length;
  while (done.size > MAX_ENTRIES || cachedBytes > MAX_BYTES) {
    const [oldKey, old] = done.entries().next().value!;
    done.delete(oldKey);
    cachedBytes -= old.length;
  }
}

/** The encoded image of `spec`, from the cache when it was rendered recently. */
export function renderImage(spec: ImageSpec): Promise<Buffer> {
  const key = `${spec.width}x${spec.height}/${spec.seed}/${spec.format}/${spec.alpha ? 'a' : 'o'}/${spec.quality ?? ''}/${spec.detailed ? 'd' : ''}`;
  const hit = done.get(key);
  if (hit !== undefined) {
    done.delete(key);
    done.set(key, hit);
    return Promise.resolve(hit);
  }
  let render = pending.get(key);
  if (render === undefined) {
    render = encode(spec);
    pending.set(key, render);
    render.then(
      (bytes) => {
        pending.delete(key);
        keep(key, bytes);
      },
      () => pending.delete(key),
    );
  }
  return render;
}
