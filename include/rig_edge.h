/* rig_edge.h: the C edge between rig and a driver.
 *
 * What a driver's C code sees of rig: the per-thread lock count (LOCK-3),
 * the signal masks around driver calls and waits (SIG-1..SIG-8), and the
 * ABI of the driver's queue functions (room, submit, commit) that rig calls
 * to put work on a device.  The decisions behind every type here are in
 * spec/decisions.md.
 *
 * Linux only: the masks are POSIX signal masks.  Windows has none (see the
 * document's SIG section); nothing here pretends otherwise.
 */
#ifndef RIG_EDGE_H
#define RIG_EDGE_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rig.word: the unit of memory sizes, in bytes.  alloc sizes are multiples. */
#define RIG_WORD 4

/* ---------------------------------------------------------------- locks */

/* The number of locks the calling thread holds while OCaml code may run
 * (rig's, drivers', io libraries').  0 means "no lock": rig makes its own
 * calls, and drivers their lock-taking public functions, only then. */
int rig_holds(void);

/* Count a lock the calling thread is about to take (call right before the
 * take) and uncount it (call right after the give).  LOCK-3. */
void rig_hold(void);
void rig_give(void);

/* ------------------------------------------------------------- signals */

/* The signals a fault raises, left unblocked by rig_mask so that a real
 * fault still kills or reports: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
 * SIGSYS, SIGABRT. */
int rig_fault_signal(int signo);

/* Block every signal of the calling thread but the fault signals; store the
 * previous mask in *old (if not NULL).  rig calls this before every driver
 * call but locate, peer and signaled (SIG-1). */
void rig_mask(sigset_t *old);

/* Give the calling thread back a mask rig_mask saved. */
void rig_restore(const sigset_t *old);

/* Around a wait's blocking step (SIG-2): rig_unblock right before it,
 * rig_block right after it, whether it returns or fails.  rig_unblock
 * restores the mask the thread had before rig_mask; rig_block masks again.
 * From OCaml, Rig_edge_primitives.wait does both and also runs the OCaml
 * handlers of signals that came during the wait before masking (SIG-4). */
void rig_unblock(void);
void rig_block(void);

/* Block all signals (fault signals included? no: those stay) for the
 * duration of a finaliser or an exit handler, waits included (SIG-7): a
 * wait inside a shield unblocks nothing, also inside a masked call.
 * rig_shield_begin returns the mask to give back to rig_shield_end. */
void rig_shield_begin(sigset_t *old);
void rig_shield_end(const sigset_t *old);

/* -------------------------------------------------------------- queues */

/* What a part of a submission asks the device to do.  Region and entry
 * handles are the ones the driver itself gave rig: a region's from
 * locate (Rig_edge.place.handle), an entry's from entry (Entry e). */
enum rig_op {
  RIG_OP_FILL = 1,   /* a[0]=region a[1]=offset a[2]=length a[3]=byte      */
  RIG_OP_COPY = 2,   /* a[0]=src a[1]=src offset a[2]=dst a[3]=dst offset
                        a[4]=length                                         */
  RIG_OP_LAUNCH = 3  /* a[0]=entry handle, a[1..5]=arguments (region handles
                        or plain integers, as the function defines)          */
};

#define RIG_PART_ARGS 6
struct rig_part {
  uint32_t op;                  /* enum rig_op */
  uint32_t reserved;            /* 0 */
  uint64_t a[RIG_PART_ARGS];
};

struct rig_submission {
  uint32_t n_parts;
  const struct rig_part *parts;
};

/* room's answers. */
#define RIG_ROOM 0  /* the queues hold the parts now; submit may follow   */
#define RIG_GROW 1  /* they do not: rig calls the driver's grow, then room
                       again, on this same thread (QUEUE-5)               */

/* A device's C functions.  rig calls them with the device pointer the
 * driver gave in its facts, from any thread, several at once for
 * different submissions; counted where the device declares may_block.
 *   room:   RIG_ROOM or RIG_GROW for s on the calling thread.
 *   submit: encode s after a RIG_ROOM of room on this thread; value is the
 *           timeline value the work writes into the word once done.  0 on
 *           success; anything else is a failed submit and loses the device.
 *   commit: make everything this thread encoded run.  0 on success;
 *           anything else is a failed commit and loses the device. */
struct rig_queue_fns {
  int (*room)(void *dev, const struct rig_submission *s);
  int (*submit)(void *dev, const struct rig_submission *s, uint64_t value);
  int (*commit)(void *dev);
};

#ifdef __cplusplus
}
#endif
#endif /* RIG_EDGE_H */
