// `@sluice/backplane/fastify`: the direct strategy's internal routes as a fastify plugin. A subpath of its own so that
// the main entry's declarations never import fastify, an optional peer only a process mounting the routes installs
// (a NATS-only user compiling against `@sluice/backplane` would otherwise need fastify's types).
export { type DirectRoutesOptions, directRoutes } from './direct/plugin.js';
export type { DirectRoutesTarget } from './direct/routes-target.js';
