/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type tls from 'node:tls';
import type { Allowed, OwnListener, Policy } from '../../policy/index.js';
import type { ClientLookup } from '../dns/index.js';
import type { Connect, UpstreamPools, UpstreamTrust } from '../upstream/index.js';
import type { ProxyLimits } from '../budget/index.js';
import type { DecisionRecorder, ProxyObserver, Refusal } from '../record/index.js';
import type { ClientConnection } from './connection.js';

export interface ProxyContext {
  policy(): Policy;
  /** Lookups within the client's share of those in flight (dns.ts). */
  readonly lookup: ClientLookup;
  /** Whether a destination is one of the proxy's own listeners (refused: it would loop). */
  readonly ownListener: OwnListener;
  readonly limits: ProxyLimits;
  readonly connect: Connect;
  readonly pools: UpstreamPools;
  readonly observer: ProxyObserver;
  /** The deployment CA's leaves and the upstream trust store, when the proxy has them (inspected entries). */
  inspection(): Inspection | undefined;
  /** Starts the inspected connections (proxy/inspect/). */
  readonly inspector: InspectStarter;
}

/** What signs the leaves of inspected hosts (leaf-certificates.ts implements it). */
export interface LeafIssuer {
  /** A secure context whose certificate names `host`, signed by the deployment CA. */
  contextFor(host: string): Promise<tls.SecureContext>;
  /** The CA certificate (PEM). */
  readonly caCertificatePem: string;
}

/** What inspection needs: the leaves for clients, and the trust store for upstreams. */
export interface Inspection {
  readonly leaves: LeafIssuer;
  readonly upstreamCa: UpstreamTrust;
}

/** How an inspected connection meets its client before its handshake: as its tunnel would have. */
export interface InspectEntry {
  readonly established: string | undefined;
  refuse(connection: ClientConnection, refusal: Refusal): void;
}

export interface InspectStart {
  readonly decision: Allowed;
  readonly started: number;
  readonly decideMs: number;
  /** Bytes of `head` already charged to the connection's memory (a transparent hello). */
  readonly headCharged: number;
}

/** Terminates the TLS of an inspected connection and serves the requests inside (proxy/inspect/). */
export interface InspectStarter {
  start(connection: ClientConnection, inspection: Inspection | undefined, start: InspectStart, head: Buffer, record: DecisionRecorder, entry: InspectEntry): Promise<void>;
}

