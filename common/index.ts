/**
 * What every part of the project shares: the error base class, the deployment CA, the bounded read of a configured file, the product images' names and the
 * interfaces of the egress and socket proxy images.
 */
export { CodedError, isCodedError } from './coded-error.js';
export { createAuthority, decodeInline, encodeInline, parseAuthority, randomSerial, x509, type Authority } from './certificate-authority.js';
export { readRegularFile, RegularFileError } from './regular-file.js';
export { requireCjs } from './require-cjs.js';
export { VERSION } from './version.js';
export { IMAGES } from './images.js';
export { SOCKET_PROXY_ENV } from './socket-proxy.js';
export {
  decodeAllowHosts,
  EGRESS_ENV,
  EGRESS_HEALTH_PATH,
  EGRESS_HINT_SANDBOX,
  EGRESS_SANDBOX_HEADER,
  sandboxHealthValue,
  EGRESS_METRICS,
  EGRESS_METRICS_PATH,
  EGRESS_METRICS_PORT,
  EGRESS_PROXY_PORT,
  encodeAllowHosts,
} from './egress-image.js';
export {
  REGISTRATION_MAX_BYTES,
  registrationArchive,
  RegistrationArchiveError,
  SLOT_NAME,
  TENANTS_DIR,
  ustarHeader,
  type RegistrationHost,
  type RegistrationPolicy,
  type SlotFileValue,
} from './tenant-archive.js';
