// The version both entry points print with --version and send in their User-Agent.
export const VERSION = '0.1.0';
