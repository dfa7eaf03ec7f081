/** Helpers of the simulator's image and video tests: reference images, pixel statistics, ffprobe, cut bodies. */
import ffprobe from '@ffprobe-installer/ffprobe';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import sharp from 'sharp';

/** A PNG reference image of `width`x`height` with a gradient and, when `alpha`, a transparent corner. */
export async function referencePng(width: number, height: number, alpha = false, shade = 0): Promise<Buffer> {
  const channels = alpha ? 4 : 3;
  const raw = Buffer.alloc(width * height * channels);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * channels;
      raw[i] = Math.floor((255 * x) / width);
      raw[i + 1] = Math.floor((255 * y) / height);
      raw[i + 2] = (shade * 37) & 255;
      if (alpha) raw[i + 3] = x < width / 2 && y < height / 2 ? 0 : 255;
    }
  }
  return sharp(raw, { raw: { width, height, channels } }).png().toBuffer();
}

/** Dimensions, channels and pixel statistics of an encoded image. */
export async function inspectImage(
  bytes: Buffer,
): Promise<{ format: string; width: number; height: number; channels: number; hasAlpha: boolean; colours: boolean }> {
  const img = sharp(bytes);
  const meta = await img.metadata();
  const stats = await img.stats();
  const colour = stats.channels.slice(0, 3);
  return {
    format: meta.format,
    width: meta.width!,
    height: meta.height!,
    channels: meta.channels!,
    hasAlpha: meta.hasAlpha === true,
    // More than one colour, with structure: every colour channel spans values, one varies widely, the histogram is rich.
    colours: colour.every((c) => c.max > c.min) && colour.some((c) => c.stdev > 20) && stats.entropy > 3,
  };
}

const exec = promisify(execFile);

/** What ffprobe reports of an MP4's first video stream. */
export interface Probe {
  codec: string;
  width: number;
  height: number;
  pixFmt: string;
  frames: number;
  duration: number;
}

/** Runs the ffprobe of @ffprobe-installer/ffprobe on `bytes`. */
export async function probe(bytes: Buffer): Promise<Probe> {
  const dir = await mkdtemp(join(tmpdir(), 'farebox-sim-test-'));
  try {
    const file = join(dir, 'clip.mp4');
    await writeFile(file, bytes);
    const { stdout } = await exec(ffprobe.path, [
      '-v',
      'error',
      '-select_streams',
      'v:0',
      '-count_packets',
      '-show_entries',
      'stream=codec_name,width,height,pix_fmt,nb_read_packets:format=duration',
      '-of',
      'json',
      file,
    ]);
    const out = JSON.parse(stdout) as { streams: Array<Record<string, string | number>>; format: { duration: string } };
    const s = out.streams[0]!;
    return {
      codec: String(s.codec_name),
      width: Number(s.width),
      height: Number(s.height),
      pixFmt: String(s.pix_fmt),
      frames: Number(s.nb_read_packets),
      duration: Number(out.format.duration),
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Reads a response body until it ends or the connection drops: the bytes received, and whether it dropped. */
export async function readUntilDrop(res: Response): Promise<{ bytes: number; dropped: boolean }> {
  const reader = res.body!.getReader();
  let bytes = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { bytes, dropped: false };
      bytes += value.length;
    }
  } catch {
    return { bytes, dropped: true };
  }
}

/** Waits `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
