#!/usr/bin/env python3
"""Writes the seed corpus of room_grow_fuzz (fuzz/corpus/room_grow/).

The input format (room_grow_fuzz.c, run()): three header bytes, then one
byte per step, low nibble the action, high nibble its parameter; a step
that starts a submission reads more bytes (parts count, each part's kind,
regions).  Every byte string is a valid input; these seeds only start the
fuzzer at schedules that reach each feature.  Check one with
RIG_FUZZ_TRACE=1 out/fuzz/room_grow_fuzz fuzz/corpus/room_grow/NAME.
"""
import os
import sys

T = lambda i, commit=0: (i & 7) | (commit << 4)  # a thread's next step
WORK, WORD, SLEEP, SLEEP_OTHER = 0x08, 0x0A, 0x0B, 0x1B
ALLOC, ALLOC_GARBAGE, DROP = 0x0C, 0x1C, 0x0D
FAIL_SUBMIT, FAIL_COMMIT = 0x0E, 0x1E
STOP = 0x1F
NOPS = lambda n: [n] + [3] * n  # a submission of n launches of the nop


def hdr(threads, slots, extra, regions=0, may_block=0):
    # each initial region reads its size byte (0: 64 bytes)
    return [(threads - 1) | (may_block << 2), slots | (extra << 3), regions] + [0] * regions


SEEDS = {
    # one thread, room fits: room, submit, commit, the work, stop
    "one_thread_fits": hdr(1, 7, 4) + [T(0)] + NOPS(2) + [T(0), T(0, 1)] + [WORK] * 4 + [WORD, STOP],
    # one thread, a submission bigger than the queue: RIG_GROW, grow, room
    "one_thread_grows": hdr(1, 1, 8) + [T(0)] + NOPS(4) + [T(0)] * 3 + [T(0, 1)] + [WORK] * 8 + [STOP],
    # a budget too small: Short, reclamation rounds, Out_of_memory
    "short_and_reclaim": hdr(1, 1, 1, 2) + [T(0)] + NOPS(5) + [T(0)] * 10 + [STOP],
    # two threads interleaved between room and grow, with a program alloc
    "two_threads_interleave": hdr(2, 2, 5, 1) + [T(0)] + NOPS(3) + [T(1)] + NOPS(3)
    + [T(0), T(1), ALLOC, T(0), T(1), T(0), T(1), T(0, 1), T(1, 1)] + [WORK] * 12 + [STOP],
    # sleeps and word reads while submissions are half done (TIME-6)
    "sleep_mid_submission": hdr(2, 4, 4) + [T(0)] + NOPS(2) + [SLEEP, T(1)] + NOPS(1)
    + [SLEEP_OTHER, T(0), WORD, T(0, 1), WORK, SLEEP, WORK, T(1), T(1, 1)] + [WORK] * 4 + [STOP],
    # stop while a part runs, with work encoded and not committed
    "stop_while_running": hdr(2, 7, 2) + [T(0)] + NOPS(3) + [T(0), T(0, 1), WORK, T(1)] + NOPS(1)
    + [T(1), STOP, WORD, WORK, WORD],
    # the second submit fails: the device is lost, then stopped
    "failed_submit": hdr(1, 7, 2) + [FAIL_SUBMIT | 0x20, T(0)] + NOPS(1) + [T(0), T(0)] + NOPS(1)
    + [T(0), WORK, 0x0F, STOP, WORD],
    # a failed commit
    "failed_commit": hdr(1, 7, 2) + [FAIL_COMMIT, T(0)] + NOPS(1) + [T(0), T(0, 1), STOP],
    # fills of the witness and of regions, copies, drops (program frees)
    "fills_and_copies": hdr(2, 6, 10, 3) + [T(0), 4, 0, 1, 0, 0x55, 2, 0, 1, 4, T(0), T(0, 1)]
    + [WORK] * 8 + [DROP, T(1), 2, 1, 0, 0x11, 2, 1, 0, T(1), T(1, 1)] + [WORK] * 6 + [DROP, STOP],
}


def main(out):
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(bytes(data))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "room_grow"))
