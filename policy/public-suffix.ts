/**
 * Whether a name is a public suffix: a name under which unrelated parties get their own names, so
 * that a wildcard over it in an allowlist would allow all of them at once. Two kinds, both from
 * the Public Suffix List through tldts (kept up to date upstream, not by hand here):
 * - the ICANN section (`com`, `co.uk`, `b.kawasaki.jp`), with the list's implicit `*` rule: a
 *   single label the list does not know (`test`, `corp`) counts as a suffix too;
 * - the private section (`github.io`, `duckdns.org`, `ngrok.io`, `s3.amazonaws.com`,
 *   `workers.dev`): names a company hands out below its own domain, often to anyone who signs up,
 *   so `*.github.io` would reach a page an attacker publishes as `attacker.github.io`.
 */
import type * as Tldts from 'tldts';
import { requireCjs } from '../common/index.js';

// Loaded on the first wildcard entry: the list is several MiB resident, and an allowlist of exact
// names (the common case for a sandbox's proxy) never needs it.
let tldts: typeof Tldts | undefined;

// allowPrivateDomains: the private section's rules apply too (`github.io` is then a suffix, not
// the registrable domain of `attacker.github.io`).
const OPTIONS = { allowPrivateDomains: true, detectIp: false, extractHostname: false, validateHostname: false } as const;

/** Which part of the list makes a name a public suffix. */
export type SuffixSection = 'icann' | 'private' | 'implicit';

/**
 * The section that makes `name` itself a public suffix, or undefined when `name` is a registrable
 * domain or a name below one (one owner). `name` must already be a normalised host name
 * (policy/host-name.ts).
 */
export function publicSuffixSection(name: string): SuffixSection | undefined {
  tldts ??= requireCjs('tldts') as typeof Tldts;
  const parsed = tldts.parse(name, OPTIONS);
  // A public suffix has no registrable domain of its own: the domain starts one label below it.
  if (parsed.domain !== null) return undefined;
  if (parsed.isPrivate === true) return 'private';
  return parsed.isIcann === true ? 'icann' : 'implicit';
}

/**
 * The public suffix `name` lies below (ICANN or private section, with the implicit `*` rule), or
 * undefined when `name` is itself a public suffix. A wildcard entry uses it at match time: a name
 * below a suffix that is below the wildcard's parent (`bucket.s3.amazonaws.com` for
 * `*.amazonaws.com`) belongs to whoever registered it under that suffix, not to the parent's owner.
 */
export function suffixBelow(name: string): string | undefined {
  tldts ??= requireCjs('tldts') as typeof Tldts;
  const parsed = tldts.parse(name, OPTIONS);
  return parsed.domain === null || parsed.publicSuffix === null ? undefined : parsed.publicSuffix;
}
