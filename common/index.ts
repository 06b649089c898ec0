/** What every part of the project shares: the error base class and the egress image's interface. */
export { CodedError } from './coded-error.js';
export { requireCjs } from './require-cjs.js';
export {
  decodeAllowHosts,
  EGRESS_ENV,
  EGRESS_HEALTH_PATH,
  EGRESS_METRICS,
  EGRESS_METRICS_PATH,
  EGRESS_METRICS_PORT,
  EGRESS_NODE_OPTIONS,
  EGRESS_PROXY_PORT,
  encodeAllowHosts,
} from './egress-image.js';
