/** Model families and reasoning levels of the spec: names only, so any module can import them. */

/** Model families of the spec; the first three are text. */
export const FAMILIES = ['alpha', 'beta', 'gamma', 'img', 'vidA', 'vidB', 'vidC'] as const;
/** One model family. */
export type Family = (typeof FAMILIES)[number];

/** Reasoning levels in order; "nearest supported level" is measured on this scale. */
export const REASONING_SCALE = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;
/** One reasoning level. */
export type ReasoningLevel = (typeof REASONING_SCALE)[number];
