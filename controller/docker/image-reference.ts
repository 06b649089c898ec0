import { SandboxError } from '../spec/index.js';

/**
 * An image reference as a pull sends it. dockerd pulls every tag of a name given without a tag or
 * digest (the socket proxy refuses that: image_tag_required), while a container create reads the
 * same name as name:latest; so a pull names that tag itself, as the docker CLI does.
 */
/**
 * `image` as it may go into an engine path (`/images/<image>/json`): the characters of an image
 * reference only. Any other would be read by dockerd as more of the request: `x/get?` is the
 * export route (the whole image as a tarball), and the image check of the doctor is given an
 * operator's `--image` as typed, on the engine itself as often as through the socket proxy.
 */
export function imagePathPart(image: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}$/.test(image) || image.includes('..') || image.includes('//')) {
    throw new SandboxError('invalid_spec', `${JSON.stringify(image)} is not an image reference (letters, digits, ".", "_", "-", "/", ":" and "@" only), e.g. capybara-sandbox:latest.`);
  }
  return image;
}

export function pullReference(image: string): string {
  if (image.includes('@')) return image;
  const lastComponent = image.slice(image.lastIndexOf('/') + 1);
  return lastComponent.includes(':') ? image : `${image}:latest`;
}
