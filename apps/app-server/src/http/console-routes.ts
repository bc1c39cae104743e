import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NotFoundError } from '@sluice/core';
import type { FastifyInstance, FastifyReply } from 'fastify';

/** Where the console is served; its static files need no token (they hold no data: every API call does). */
export const CONSOLE_PREFIX = '/console';

/** True for the console's page and assets (the auth hook lets them through). */
export function isConsolePath(path: string): boolean {
  return path === CONSOLE_PREFIX || path.startsWith(`${CONSOLE_PREFIX}/`);
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
};

/** The page may talk to this origin only, and may not be framed. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/**
 * Where the built console is: `dist/console` beside the bundled server (`dist/index.js`, `dist/bin.js`), or the
 * package's `dist/console` when the server runs from its TypeScript sources (tests, `pnpm dev`).
 */
export function consoleAssetsDir(): string | null {
  const here = fileURLToPath(new URL('.', import.meta.url));
  for (const candidate of [join(here, 'console'), join(here, '..', '..', 'dist', 'console')])
    if (existsSync(join(candidate, 'index.html'))) return candidate;
  return null;
}

interface Asset {
  body: Buffer;
  type: string;
}

function loadAssets(dir: string): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  const walk = (folder: string) => {
    for (const name of readdirSync(folder)) {
      const path = join(folder, name);
      if (statSync(path).isDirectory()) walk(path);
      else
        assets.set(relative(dir, path).split(sep).join('/'), {
          body: readFileSync(path),
          type: TYPES[extname(name)] ?? 'application/octet-stream',
        });
    }
  };
  walk(dir);
  return assets;
}

/**
 * `GET /console`: the operator console, a single-page app built with Vite into `dist/console` and shipped in the
 * package. Its files are read once at start and served from memory (hashed asset names cache for a year; the page
 * itself is revalidated). Nothing is fetched from elsewhere at run time.
 *
 * @example
 * ```ts
 * await app.register(consoleRoutes, { dir: consoleAssetsDir() });
 * // open http://127.0.0.1:7070/console
 * ```
 */
export async function consoleRoutes(app: FastifyInstance, options: { dir: string | null }): Promise<void> {
  const assets = options.dir ? loadAssets(options.dir) : new Map<string, Asset>();
  const send = (reply: FastifyReply, path: string) => {
    const asset = assets.get(path);
    if (!asset)
      throw new NotFoundError(
        assets.size === 0
          ? 'The console is not built: run `pnpm build` (it builds apps/app-server/console into dist/console)'
          : `No console file ${path}`,
      );
    return reply
      .headers(SECURITY_HEADERS)
      .header(
        'cache-control',
        path.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      )
      .type(asset.type)
      .send(asset.body);
  };
  const page = { schema: { hide: true } };
  app.get(CONSOLE_PREFIX, page, async (_request, reply) => send(reply, 'index.html'));
  app.get(`${CONSOLE_PREFIX}/`, page, async (_request, reply) => send(reply, 'index.html'));
  // The page by its file name too, as a static server answers it (bookmarks, links, proxies that add it).
  app.get(`${CONSOLE_PREFIX}/index.html`, page, async (_request, reply) => send(reply, 'index.html'));
  app.get<{ Params: { '*': string } }>(`${CONSOLE_PREFIX}/assets/*`, page, async (request, reply) =>
    send(reply, `assets/${request.params['*']}`),
  );
}
