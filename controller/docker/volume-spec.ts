/**
 * Volume create bodies. `size` is only passed to a configured driver (the local driver
 * ignores or rejects it); whether diskMb can be honoured at all is decided in limits.ts.
 */
export interface VolumeCreateBody {
  Name: string;
  Driver?: string;
  DriverOpts?: Record<string, string>;
  Labels: Record<string, string>;
}

export function volumeBody(
  name: string,
  labels: Readonly<Record<string, string>>,
  driver: string | undefined,
  size: string | undefined,
): VolumeCreateBody {
  const body: VolumeCreateBody = { Name: name, Labels: { ...labels } };
  if (driver !== undefined) {
    body.Driver = driver;
    if (size !== undefined) body.DriverOpts = { size };
  }
  return body;
}
