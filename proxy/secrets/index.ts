/** Secrets the sandbox never holds: their values loaded with the policy, and request bodies watched for their placeholders. */
export { fingerprint, loadSecrets, MAX_SECRET_BYTES, MIN_PLACEHOLDER_LENGTH, placeholderVariable, type Environment, type ReadFile } from './secret-values.js';
export { PlaceholderInBody, PlaceholderScanner, scannedBody } from './placeholder-scanner.js';
export { SecretReflected, ValueWatch } from './value-watch.js';
