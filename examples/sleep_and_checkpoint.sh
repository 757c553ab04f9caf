#!/bin/sh
# A shell job that honours the scheduler's preemption contract.
#
# Counts STEPS steps of SLEEP_PER_STEP seconds each, printing "step N/STEPS".
# On SIGTERM (or SIGINT) it saves the step reached into $CHECKPOINT_DIR/step
# (atomically: write a temp file, then rename), writes the agent's marker
# file .checkpoint-complete and exits with status 143. With RESUME=1 it
# continues after the saved step, so no step is done twice.
#
#   STEPS=20 SLEEP_PER_STEP=0.5 sh examples/sleep_and_checkpoint.sh
set -eu

STEPS=${STEPS:-30}
SLEEP_PER_STEP=${SLEEP_PER_STEP:-1}
CKPT=${CHECKPOINT_DIR:-./checkpoint}
mkdir -p "$CKPT"

step=0
if [ "${RESUME:-0}" = 1 ] && [ -f "$CKPT/step" ]; then
    step=$(cat "$CKPT/step")
    echo "resumed from checkpoint at step $step"
fi

save() {
    echo "$step" > "$CKPT/step.tmp"
    mv "$CKPT/step.tmp" "$CKPT/step"
    echo "$step" > "$CKPT/.checkpoint-complete.tmp"
    mv "$CKPT/.checkpoint-complete.tmp" "$CKPT/.checkpoint-complete"
}

on_stop() {
    save
    echo "checkpoint saved at step $step; exiting"
    exit 143
}
trap on_stop TERM INT

while [ "$step" -lt "$STEPS" ]; do
    # Sleep in the background and wait for it: a trapped signal interrupts
    # "wait" at once, whereas a foreground sleep would delay the trap.
    sleep "$SLEEP_PER_STEP" &
    wait $! || true
    step=$((step + 1))
    echo "step $step/$STEPS"
done
save
echo "done step=$step"
