/** Where a component that runs beside the call path logs: Fastify's logger in the gateway, JSON lines on stderr in the settle process. */
export interface Log {
  error(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  /** What needs no action (an escrow's own deployment roles); a Log without it drops those. */
  info?(obj: object, msg: string): void;
}
