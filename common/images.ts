/**
 * The names of the product images (SPEC fixes them), read from images.json, the one file that
 * scripts/build-images.sh reads too: what the build tags is what the controller, the operator
 * CLI, the tests and the bench ask the engine for.
 */
import names from './images.json' with { type: 'json' };

/** `sandbox`: the default sandbox image; `egress`: the egress proxy; `proxy`: the Docker socket proxy; `cli`: the plugin and its CLI. */
export const IMAGES: Readonly<{ sandbox: string; egress: string; proxy: string; cli: string }> = Object.freeze({ ...names.images });
