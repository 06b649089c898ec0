/**
 * Where the deployment CA comes from, as one rule for the proxy and `capybara-egress ca`: the
 * inline variable (a Kubernetes Secret), else a directory (--ca-dir, its variable, or the default).
 * The inline variable and a directory given on purpose are refused together: the operator meant
 * one of them, and the proxy must not pick.
 */
import { resolve } from 'node:path';
import { EGRESS_ENV } from '../../common/index.js';
import { DEFAULT_CA_DIR, type CaSource } from './ca-store.js';

export type CaSourcePick = { readonly ok: true; readonly source: CaSource } | { readonly ok: false; readonly problem: string };

export function caSource(flagDir: string | undefined, env: NodeJS.ProcessEnv): CaSourcePick {
  // resolve('') is the working directory: the CA key would be kept wherever the proxy was started.
  if (flagDir === '') return { ok: false, problem: `--ca-dir is empty: give the CA directory, or leave the flag out for the default (${DEFAULT_CA_DIR})` };
  const inline = env[EGRESS_ENV.caInline];
  const envDir = env[EGRESS_ENV.caDir];
  const dir = flagDir !== undefined ? { dir: flagDir, from: '--ca-dir' } : envDir !== undefined && envDir !== '' ? { dir: envDir, from: EGRESS_ENV.caDir } : undefined;
  if (inline !== undefined && inline !== '') {
    if (dir !== undefined) return { ok: false, problem: `both ${EGRESS_ENV.caInline} and ${dir.from} are set: give the CA one way only` };
    return { ok: true, source: { kind: 'inline', value: inline, from: EGRESS_ENV.caInline } };
  }
  if (dir === undefined) return { ok: true, source: { kind: 'dir', dir: DEFAULT_CA_DIR, from: 'the default CA directory' } };
  return { ok: true, source: { kind: 'dir', dir: resolve(dir.dir), from: dir.from } };
}
