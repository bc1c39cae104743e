// What the quick start prints once Sluice serves: the URLs of both servers and their logs, and curl queries that
// work as printed against the cities endpoint.
import { join } from 'node:path';
import { getJson } from './http.mjs';
import { bold, say, shown } from './output.mjs';
import { apiUrl, appUrl, endpoint, logDir } from './settings.mjs';

function curlExamples(parisId) {
  const post = (route, body) =>
    `curl -s ${apiUrl}/v1/endpoints/${endpoint}/${route} -H 'content-type: application/json' -d '${JSON.stringify(body)}'`;
  return [
    ['one city by its primary key (Paris)', `curl -s ${apiUrl}/v1/endpoints/${endpoint}/records/${parisId}`],
    [
      'cities of the Netherlands ordered by name, first page of 5 (index [country, name]; "next" is the cursor for $after)',
      post('query', { $filter: { country: 'NL' }, $order_by: { name: 'asc' }, $limit: 5 }),
    ],
    ['how many cities France has (index [country])', post('count', { $filter: { country: 'FR' } })],
    ['the three northernmost cities (index [lat])', post('query', { $order_by: { lat: 'desc' }, $limit: 3 })],
    [
      'cities on the 60th parallel, at most 5 (a range on [lat])',
      post('query', { $filter: { lat: { $gte: 59.95, $lt: 60.05 } }, $limit: 5 }),
    ],
    [
      'the endpoints this api-server serves, with their cache generation and checkpoint',
      `curl -s ${apiUrl}/v1/endpoints`,
    ],
  ];
}

async function findParis() {
  try {
    const body = await getJson(`${apiUrl}/v1/endpoints/${endpoint}/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ $filter: { name: 'Paris', country: 'FR' }, $limit: 1 }),
    });
    return body.records[0]?.id ?? 1;
  } catch {
    return 1;
  }
}

/** Prints where everything is and the example queries (looked up once: Paris's id in this data). */
export async function printRunning() {
  const parisId = await findParis();
  say();
  say(bold('Sluice is running.'));
  say(`  query API (api-server):   ${apiUrl}   OpenAPI docs: ${apiUrl}/docs`);
  say(
    `  console (app-server):     ${appUrl}/console   endpoints, transfers, nodes; Rebuild / Promote / Roll back`,
  );
  say(`  control API (app-server): ${appUrl}   OpenAPI docs: ${appUrl}/docs   metrics: ${appUrl}/metrics`);
  say(
    `  logs (JSON lines):        ${shown(join(logDir, 'app-server.log'))}, ${shown(join(logDir, 'api-server.log'))}`,
  );
  say();
  say('Try these queries:');
  say();
  for (const [what, command] of curlExamples(parisId)) {
    say(`# ${what}`);
    say(command);
    say();
  }
  say('Press Ctrl-C to stop both servers.');
}
