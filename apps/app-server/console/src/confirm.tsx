import { useEffect, useRef, useState } from 'preact/hooks';

/**
 * A button for an action that cannot be taken back (Terminate, Promote, Roll back): the first click only asks — the
 * question, a confirming button and Cancel, where the focus goes (Escape cancels too) — so a stray click or Enter
 * changes nothing.
 *
 * @example
 * ```tsx
 * <ConfirmButton label="Terminate" question="Terminate t1? Its work stops for good." confirmLabel="Yes, terminate t1"
 *   disabled={busy} onConfirm={() => void terminate()} />
 * ```
 */
export function ConfirmButton(props: {
  /** The button's text, and what the confirmation group is named after ("Confirm <label>"). */
  label: string;
  question: string;
  confirmLabel: string;
  disabled: boolean;
  onConfirm: () => void;
  class?: string;
}) {
  const [asking, setAsking] = useState(false);
  const cancel = useRef<HTMLButtonElement>(null);
  const trigger = useRef<HTMLButtonElement>(null);
  const returnFocus = useRef(false);
  useEffect(() => {
    if (asking) cancel.current?.focus();
    else if (returnFocus.current) {
      returnFocus.current = false;
      trigger.current?.focus();
    }
  }, [asking]);
  const stopAsking = () => {
    returnFocus.current = true;
    setAsking(false);
  };
  return (
    <>
      <button
        ref={trigger}
        type="button"
        class={props.class}
        disabled={props.disabled || asking}
        aria-expanded={asking}
        onClick={() => setAsking(true)}
      >
        {props.label}
      </button>
      {asking && (
        <fieldset
          class="confirm"
          aria-label={`Confirm ${props.label}`}
          onKeyDown={(event) => {
            if (event.key === 'Escape') stopAsking();
          }}
        >
          <span>{props.question}</span>{' '}
          <button
            type="button"
            class="danger"
            disabled={props.disabled}
            onClick={() => {
              setAsking(false);
              props.onConfirm();
            }}
          >
            {props.confirmLabel}
          </button>{' '}
          <button ref={cancel} type="button" class="quiet" onClick={stopAsking}>
            Cancel
          </button>
        </fieldset>
      )}
    </>
  );
}
