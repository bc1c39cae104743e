// The NATS JetStream client of the workspace, resolved through @sluice/pipeline's dependencies (the examples
// are not a package of their own).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const fromPipeline = createRequire(new URL('../../packages/pipeline/package.json', import.meta.url));
const load = (name) => import(pathToFileURL(fromPipeline.resolve(name)).href);

export const { connect } = await load('@nats-io/transport-node');
export const { jetstreamManager } = await load('@nats-io/jetstream');
