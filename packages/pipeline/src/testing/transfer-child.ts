/**
 * A child process that runs one transfer (tests SIGKILL it mid-run). argv[2] = JSON
 * `{ request, checkpointFile, connections, commitEveryRecords, fileChunkBytes, nats, epoch?, ownerFile?, owner?,
 * replication? }` (`epoch`: the run's fencing epoch, default 1; a later run at a higher epoch fences earlier ones
 * off; `replication`: tuning of a replication source). Prints `COMMIT <epoch> <written>` after each commit,
 * `PHASE <phase>` when the progress phase changes and `DONE <json>` at the end.
 */
import { runTransfer } from '../transfer.js';
import { fencedFileCheckpointPort, fileCheckpointPort } from './file-checkpoint.js';

const input = JSON.parse(process.argv[2]!);
// With `ownerFile` + `owner` the port is fenced: saves fail with STALE_EPOCH once another owner took over.
const port = input.ownerFile
  ? fencedFileCheckpointPort(
      input.checkpointFile,
      input.ownerFile,
      input.owner,
      input.request.id,
      input.epoch ?? 1,
    )
  : fileCheckpointPort(input.checkpointFile, { epoch: input.epoch ?? 1, transferId: input.request.id });
const save = port.save;
port.save = async (checkpoint: unknown) => {
  await save(checkpoint);
  const c = checkpoint as { epoch: number; positions: Record<string, { written?: number }> };
  const sink = c.positions[`${input.request.id}.sink`];
  process.stdout.write(`COMMIT ${c.epoch} ${sink?.written ?? 0}\n`);
};
const controller = new AbortController();
let phase: string | null = null;
try {
  const result = await runTransfer(input.request, {
    checkpoint: port,
    connections: input.connections ?? {},
    signal: controller.signal,
    commitEveryRecords: input.commitEveryRecords ?? 100,
    commitEveryMs: 60_000,
    ...(input.fileChunkBytes ? { fileChunkBytes: input.fileChunkBytes } : {}),
    ...(input.nats ? { nats: input.nats } : {}),
    ...(input.replication ? { replication: input.replication } : {}),
    onProgress: (progress) => {
      if (progress.phase === phase) return;
      phase = progress.phase;
      process.stdout.write(`PHASE ${phase}\n`);
    },
    onDecision: (plan) => process.stdout.write(`DECISION ${plan.decision} ${plan.reason}\n`),
  });
  process.stdout.write(
    `DONE ${JSON.stringify({ ...result, badRecordReports: undefined, checkpoint: undefined })}\n`,
  );
  process.exit(0);
} catch (err) {
  const code = (err as { code?: unknown }).code;
  process.stdout.write(`FAILED ${typeof code === 'string' ? `${code}: ` : ''}${(err as Error).message}\n`);
  process.exit(1);
}
