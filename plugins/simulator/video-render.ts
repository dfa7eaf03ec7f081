/**
 * The simulated video models' clips: playable H.264 MP4s (yuv420p, 24 fps, `+faststart`) of exactly the
 * asked width, height and duration, rendered by the shipped ffmpeg from its `testsrc2` pattern, cached
 * on disk per (width, height, seconds) in a temp directory that close() removes.
 *
 * Speed: x264 encodes one second of the pattern once per size (ultrafast, one closed GOP of 24
 * frames); an N-second clip is that second looped N times by stream copy, so its cost does not grow
 * with N. Measured on the project's 2-core VM (shared, load average 8-10): a 30 s 1280x720 clip in
 * 0.3-0.6 s (1920x1080: ~0.8 s), where encoding all 720 frames took 1.8-9 s; a cached clip costs
 * nothing. One ffmpeg runs at a time.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, stat, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ffmpegPath } from './media-libs.js';

/** Frames per second of every clip (Veo's rate). */
const FPS = 24;

/** A rendered MP4 on disk. */
export interface Clip {
  path: string;
  size: number;
}

/** Clips kept on disk; the oldest is deleted beyond this (a 30 s 1080p clip is ~16 MB). */
const MAX_CLIPS = 48;

/** Runs ffmpeg; rejects with the tail of its stderr. */
function run(bin: string, args: string[], children: Set<ChildProcess>): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ['-hide_banner', '-loglevel', 'error', '-nostdin', '-y', ...args], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.add(child);
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr = (stderr + s).slice(-2000)));
    child.on('error', (err) => {
      children.delete(child);
      reject(err);
    });
    child.on('close', (code, signal) => {
      children.delete(child);
      if (code === 0) resolve();
      else reject(new Error(`ffmpeg ${signal ?? `exited ${code}`}: ${stderr.trim()}`));
    });
  });
}

/** Renders and caches clips; one instance per simulator. */
export class VideoRenderer {
  private dir: Promise<string> | undefined;
  /** One second of the pattern per size. */
  private readonly segments = new Map<string, Promise<string>>();
  /** Clips by `WxH/S`, oldest first. */
  private readonly clips = new Map<string, Promise<Clip>>();
  private readonly children = new Set<ChildProcess>();
  /** The tail of the ffmpeg queue: the machine has two cores shared with everything else. */
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  private directory(): Promise<string> {
    this.dir ??= mkdtemp(join(tmpdir(), 'farebox-sim-'));
    return this.dir;
  }

  private ffmpeg(args: string[]): Promise<void> {
    const job = this.queue.then(async () => {
      if (this.closed) throw new Error('simulator closed');
      return run(await ffmpegPath(), args, this.children);
    });
    this.queue = job.catch(() => {});
    return job;
  }

  private segment(width: number, height: number): Promise<string> {
    const key = `${width}x${height}`;
    let seg = this.segments.get(key);
    if (seg === undefined) {
      seg = this.directory().then(async (dir) => {
        const path = join(dir, `seg-${key}.mp4`);
        await this.ffmpeg([
          '-f',
          'lavfi',
          '-i',
          `testsrc2=size=${key}:rate=${FPS}:duration=1`,
          '-c:v',
          'libx264',
          '-preset',
          'ultrafast',
          '-crf',
          '36',
          '-g',
          String(FPS),
          '-pix_fmt',
          'yuv420p',
          '-an',
          '-movflags',
          '+faststart',
          path,
        ]);
        return path;
      });
      this.segments.set(key, seg);
      seg.catch(() => this.segments.delete(key));
    }
    return seg;
  }

  /** The clip of `seconds` seconds at `width`x`height` (even sides), rendered once. */
  render(width: number, height: number, seconds: number): Promise<Clip> {
    const key = `${width}x${height}/${seconds}`;
    let clip = this.clips.get(key);
    if (clip !== undefined) {
      this.clips.delete(key);
      this.clips.set(key, clip);
      return clip;
    }
    clip = (async () => {
      const seg = await this.segment(width, height);
      const path = join(await this.directory(), `clip-${width}x${height}-${seconds}s.mp4`);
      await this.ffmpeg([
        '-stream_loop',
        String(seconds - 1),
        '-i',
        seg,
        '-c',
        'copy',
        '-movflags',
        '+faststart',
        path,
      ]);
      return { path, size: (await stat(path)).size };
    })();
    this.clips.set(key, clip);
    clip.catch(() => this.clips.delete(key));
    while (this.clips.size > MAX_CLIPS) {
      const [oldKey, old] = this.clips.entries().next().value!;
      this.clips.delete(oldKey);
      // A download still reading it keeps its open file.
      old.then((c) => unlink(c.path)).catch(() => {});
    }
    return clip;
  }

  /** Stops ffmpeg and removes the directory. */
  async close(): Promise<void> {
    this.closed = true;
    for (const child of this.children) child.kill('SIGKILL');
    if (this.dir === undefined) return;
    const dir = await this.dir.catch(() => undefined);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  }
}
