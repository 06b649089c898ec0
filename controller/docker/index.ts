/**
 * The Docker engine as the controller meets it: the one engine object (every call by name, or by
 * id for networks, with deadlines and errors mapped), the endpoint and its TLS diagnosis, and the pure builders of the
 * container, network and volume create bodies.
 */
export { DockerEngine, EngineStatusError, engineStatus, finishedWithin, imageRefusal, isEngineStatusError } from './engine.js';
export type { ContainerSummary, ExecRun, LogRead, LogRequest, ResourceSummary } from './engine.js';
export type { ContainerNetwork, ContainerView, NetworkView, SandboxEngine, VolumeView } from './sandbox-engine.js';
export { parseEndpoint } from './endpoint.js';
export { sinkWait } from './stream-demux.js';
export { SKILLS_WRITABLE_ROOT, WORKSPACE, egressContainerBody, handoverContainerBody, sandboxBodyFromInspect, sandboxContainerBody } from './container-spec.js';
export type { EgressMode, EgressPlan } from './container-spec.js';
export { internalNetworkBody, sandboxNetworkProblem, sharedNetworkBody, sharedNetworkProblem } from './network-spec.js';
export { volumeBody } from './volume-spec.js';
export { checkCreateBodies } from './body-budget.js';
export { carriesCa } from './ca-trust.js';
export { egressRegistration } from './registration-spec.js';
export { egressShardBody } from './shard-spec.js';
