// The wait for the first answer: the restart decision the app-server made, the load's progress (records written
// out of the total, and the rate) while a generation is being built, until the api-server serves the endpoint.
import { join } from 'node:path';
import { getJson, getText, sleep } from './http.mjs';
import { bold, number, red, say, shown, tty } from './output.mjs';
import { isStopping } from './servers.mjs';
import { apiUrl, appUrl, endpoint, logDir } from './settings.mjs';

/** Records the endpoint pipeline has written so far (the app-server's Prometheus gauge). */
async function recordsWritten() {
  const text = await getText(`${appUrl}/metrics`);
  const match = new RegExp(`^sluice_pipeline_records_written\\{endpoint="${endpoint}"\\} (\\d+)`, 'm').exec(
    text,
  );
  return match ? Number(match[1]) : null;
}

/** Polls the app-server (restart decision, progress) and the api-server (serving) until the endpoint is served. */
export async function waitUntilServing(total) {
  let announced = false;
  let lastLine = '';
  let lastPrinted = 0;
  let lastError = '';
  /** Progress was read at least once: the load ends on the complete count. */
  let progressShown = false;
  const started = Date.now();
  const samples = [];
  for (;;) {
    if (isStopping()) return new Promise(() => {});
    let status = null;
    try {
      const body = await getJson(`${appUrl}/v1/endpoints`);
      status = body.endpoints.find((e) => e.name === endpoint) ?? null;
    } catch {
      // not answering for a moment (starting, busy committing): poll again
    }
    if (status && !announced && status.decision) {
      announced = true;
      const { decision, reason } = status.decision;
      if (decision === 'resume')
        say(`${bold('▸ resume')} resumed from the checkpoint, no rebuild: ${reason}`);
      else say(`${bold('▸ load')}   first snapshot of "${endpoint}" (from scratch: ${reason})`);
    }
    if (status?.error && status.error.message !== lastError) {
      lastError = status.error.message;
      if (tty) process.stdout.write('\n');
      process.stderr.write(
        `${red('!')} the "${endpoint}" pipeline reports ${status.error.code}: ${status.error.message} (it retries; see ${shown(join(logDir, 'app-server.log'))})\n`,
      );
    }
    let served = null;
    try {
      served = await getJson(`${apiUrl}/v1/endpoints/${endpoint}`);
    } catch {
      // not yet: the alias moves when the first snapshot is complete
    }
    if (served && status?.buildingCache === null) {
      if (progressShown) {
        // The last poll may have been before the final commit: end the progress on the complete count.
        const done = `         ${number(served.recordCount)} / ${number(total)} records loaded (100%)`;
        if (tty) process.stdout.write(`\r${done.padEnd(lastLine.length)}\n`);
        else say(done);
      }
      return { served, status, seconds: (Date.now() - started) / 1000 };
    }
    // Progress only while a generation is being built (a resumed endpoint is already complete: nothing to show).
    const written = status?.buildingCache ? await recordsWritten().catch(() => null) : null;
    if (written !== null) {
      progressShown = true;
      const now = Date.now();
      samples.push({ t: now, written });
      while (samples.length > 2 && samples[0].t < now - 3_000) samples.shift();
      const first = samples[0];
      // One sample has no rate yet: "0 records/s" on the first line would read as a stall.
      const rate =
        now > first.t
          ? `, ${number(Math.round(((written - first.written) * 1000) / (now - first.t)))} records/s`
          : '';
      const percent = total > 0 ? Math.min(100, (written * 100) / total).toFixed(1) : '?';
      const line = `         ${number(written)} / ${number(total)} records loaded (${percent}%)${rate}`;
      if (tty) {
        process.stdout.write(`\r${line.padEnd(lastLine.length)}`);
        lastLine = line;
      } else if (written >= total) {
        // Not printed: the closing "N / N records loaded (100%)" line says it once the alias has moved.
      } else if (line !== lastLine && now - lastPrinted >= 1_000) {
        say(line);
        lastLine = line;
        lastPrinted = now;
      }
    }
    await sleep(400);
  }
}
