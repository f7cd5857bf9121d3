// A StrykerJS ignore plugin (stryker.config.mjs, `ignorers: ['log-event-metric-text']`):
// no mutants inside calls that only write text or count, i.e. logger calls
// (log.info(...), this.#log?.warn(...), logger.error(...)), Event recorder
// calls (recorder.event(...)) and metric updates (.inc(...), .observe(...)).
// What such a call says is not a safety rule; mutating it only costs run time.
// The Event *reasons* and metric *names* are constants, never mutated anyway.
import { PluginKind, declareValuePlugin } from '@stryker-mutator/api/plugin';

const LOG = /(?:^|\.)(?:#?log|logger)\??\.(?:trace|debug|info|warn|error|fatal)$/;
const TEXT_CALLEE = [LOG, /(?:^|\.)recorder\??\.event$/, /\.(?:inc|observe)$/];

export const strykerPlugins = [
  declareValuePlugin(PluginKind.Ignore, 'log-event-metric-text', {
    shouldIgnore(path) {
      if (!path.isCallExpression() && !path.isOptionalCallExpression()) return undefined;
      const callee = path.get('callee').toString().replace(/\s+/g, '');
      return TEXT_CALLEE.some((re) => re.test(callee)) ? 'log, Event or metric text (see docs/cleanup.md, "Mutation testing")' : undefined;
    },
  }),
];
