/**
 * An image reference as a pull sends it. dockerd pulls every tag of a name given without a tag or
 * digest (the socket proxy refuses that: image_tag_required), while a container create reads the
 * same name as name:latest; so a pull names that tag itself, as the docker CLI does.
 */
export function pullReference(image: string): string {
  if (image.includes('@')) return image;
  const lastComponent = image.slice(image.lastIndexOf('/') + 1);
  return lastComponent.includes(':') ? image : `${image}:latest`;
}
