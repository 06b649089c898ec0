/**
 * Whether a name is a public suffix (`com`, `co.uk`, `b.kawasaki.jp`): a name under which
 * unrelated parties register their own domains, so that `*.co.uk` in an allowlist would allow
 * every British company at once. Decided by the ICANN section of the Public Suffix List through
 * tldts (kept up to date upstream, not by hand here), with the list's implicit `*` rule: a
 * single label the list does not know (`test`, `corp`) counts as a suffix too.
 */
import type * as Tldts from 'tldts';
import { requireCjs } from '../common/index.js';

const { parse } = requireCjs('tldts') as typeof Tldts;

const OPTIONS = { allowPrivateDomains: false, detectIp: false, extractHostname: false, validateHostname: false } as const;

/** `name` must already be a normalised host name (policy/host-name.ts). */
export function isPublicSuffix(name: string): boolean {
  // A public suffix has no registrable domain of its own: the domain starts one label below it.
  return parse(name, OPTIONS).domain === null;
}
