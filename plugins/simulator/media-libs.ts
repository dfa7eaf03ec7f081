/**
 * sharp and the shipped ffmpeg, loaded on the first media request: a simulator that only answers
 * text (the benchmark, the embedded default inside `farebox serve`) never maps libvips.
 */
import type sharpType from 'sharp';

/** The sharp constructor. */
export type Sharp = typeof sharpType;

let sharp: Promise<Sharp> | undefined;

/** sharp, imported once. */
export function loadSharp(): Promise<Sharp> {
  sharp ??= import('sharp').then((m) => m.default);
  return sharp;
}

/** Path of the ffmpeg binary shipped in @ffmpeg-installer/ffmpeg (a static build with libx264). */
export async function ffmpegPath(): Promise<string> {
  return (await import('@ffmpeg-installer/ffmpeg')).default.path;
}
