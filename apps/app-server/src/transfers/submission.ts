import type { OwnerView, TransferView } from './view.js';

/**
 * What a submission came to, as the coordinator decides it; the HTTP layer maps it to a status with
 * {@link submissionReply} (one table, so a new outcome cannot be answered with a wrong status by accident).
 */
export type Submission =
  /** This call inserted the record and runs it here. */
  | { outcome: 'created'; transfer: TransferView }
  /** The transfer had finished: its stored outcome. */
  | { outcome: 'stored'; transfer: TransferView }
  /** Another run owns it (`confirmed`: its owner answered on the backplane; otherwise its lease is fresh). */
  | { outcome: 'running'; transfer: TransferView; confirmed: boolean }
  /** Its owner was gone: this node took it over and resumes it from its checkpoint. */
  | { outcome: 'resumed'; transfer: TransferView }
  /** A fire-and-forget request accepted for a run on this node. */
  | { outcome: 'accepted'; id: string; owner: OwnerView };

export type SubmissionOutcome = Submission['outcome'];

const STATUS: Record<SubmissionOutcome, 200 | 201 | 202> = {
  created: 201,
  stored: 200,
  running: 202,
  resumed: 202,
  accepted: 202,
};

/** The HTTP status and body of a submission (docs/http-api.md § Submitting). */
export function submissionReply(submission: Submission): { status: 200 | 201 | 202; body: object } {
  const status = STATUS[submission.outcome];
  switch (submission.outcome) {
    case 'created':
    case 'stored':
      return { status, body: submission.transfer };
    case 'running':
      return { status, body: { ...submission.transfer, resumed: false } };
    case 'resumed':
      return { status, body: { ...submission.transfer, resumed: true } };
    case 'accepted':
      return {
        status,
        body: { id: submission.id, mode: 'fire-and-forget', accepted: true, owner: submission.owner },
      };
  }
}
