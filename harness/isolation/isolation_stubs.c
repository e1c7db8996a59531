/* The process machinery of the certifier's isolation (see child_process.mli,
 * call_trace.mli, stop_signals.mli): children spawned in process groups of
 * their own, their ends observed without reaping them first, the stop
 * signals caught with their senders, and the page of driver calls in
 * flight that a child shares with the certifier. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/unixsupport.h>

/* Exported by the runtime, declared only under CAML_INTERNALS. */
CAMLextern int caml_rev_convert_signal_number(int);

/* ------------------------------------------------------------ spawning */

static char **string_array(value arr)
{
  mlsize_t n = Wosize_val(arr);
  char **out = calloc(n + 1, sizeof(char *));
  if (out == NULL) caml_raise_out_of_memory();
  for (mlsize_t i = 0; i < n; i++) out[i] = (char *)String_val(Field(arr, i));
  return out;
}

/* rig_iso_spawn prog argv envp fds: the child runs prog in a process group
 * of its own (so that the terminal's Ctrl-C reaches only the certifier, and
 * the group can be killed whole), with default dispositions and an empty
 * mask, stdin from /dev/null, and fds.(i) as its descriptor i + 1 (1, 2,
 * 3, ...); every other descriptor closed. */
value rig_iso_spawn(value prog, value argv, value envp, value fds)
{
  CAMLparam4(prog, argv, envp, fds);
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t fa;
  sigset_t none, all;
  pid_t pid;
  int rc;
  mlsize_t nfds = Wosize_val(fds);

  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  /* Through descriptors above every source and target, so that no dup2
   * overwrites a source another one still needs. */
  int base = (int)nfds + 1;
  for (mlsize_t i = 0; i < nfds; i++)
    if (Int_val(Field(fds, i)) >= base) base = Int_val(Field(fds, i)) + 1;
  for (mlsize_t i = 0; i < nfds; i++) posix_spawn_file_actions_adddup2(&fa, Int_val(Field(fds, i)), base + (int)i);
  for (mlsize_t i = 0; i < nfds; i++) posix_spawn_file_actions_adddup2(&fa, base + (int)i, (int)i + 1);
  posix_spawn_file_actions_addclosefrom_np(&fa, (int)nfds + 1);

  char **a = string_array(argv), **e = string_array(envp);
  /* Under the runtime lock: the strings stay where they are. */
  rc = posix_spawn(&pid, String_val(prog), &fa, &attr, a, e);
  free(a);
  free(e);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) unix_error(rc, "posix_spawn", prog);
  CAMLreturn(Val_int(pid));
}

/* rig_iso_poll pid: how the child ended, without reaping it (its group is
 * still there to kill): 0 running; 1 exited (code); 2 killed (signal);
 * 3 stopped (signal).  Answers (kind, number). */
value rig_iso_poll(value vpid)
{
  CAMLparam1(vpid);
  CAMLlocal1(res);
  siginfo_t info;
  int kind = 0, num = 0;
  memset(&info, 0, sizeof info);
  if (waitid(P_PID, Int_val(vpid), &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
    switch (info.si_code) {
    case CLD_EXITED: kind = 1; num = info.si_status; break;
    case CLD_KILLED: case CLD_DUMPED: kind = 2; num = info.si_status; break;
    case CLD_STOPPED: case CLD_TRAPPED: kind = 3; num = info.si_status; break;
    default: kind = 0;
    }
  }
  res = caml_alloc_tuple(2);
  Store_field(res, 0, Val_int(kind));
  Store_field(res, 1, Val_int(num));
  CAMLreturn(res);
}

/* Kills a process group whole; a stopped member is killed too. */
value rig_iso_kill_group(value pgid)
{
  kill(-Int_val(pgid), SIGKILL);
  return Val_unit;
}

value rig_iso_kill(value pid)
{
  kill(Int_val(pid), SIGKILL);
  return Val_unit;
}

/* Reaps a child that has ended (or been killed): never blocks long. */
value rig_iso_reap(value pid)
{
  int st;
  caml_enter_blocking_section();
  while (waitpid(Int_val(pid), &st, __WALL) < 0 && errno == EINTR) {}
  caml_leave_blocking_section();
  return Val_unit;
}

/* Processes whose parent died are given to the certifier rather than to
 * init, so that it can find and end what a driver left running. */
value rig_iso_subreaper(value unit)
{
  (void)unit;
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  return Val_unit;
}

/* ---------------------------------------------------- the stop signals */

/* SIGINT, SIGTERM and SIGHUP with their senders, for the certifier to
 * judge in its loop (a driver's process may send them too). */
#define PENDING 32
static volatile sig_atomic_t pend_sig[PENDING];
static volatile sig_atomic_t pend_pid[PENDING];
static atomic_int pend_head, pend_tail;

static void on_stop_signal(int sig, siginfo_t *info, void *ctx)
{
  (void)ctx;
  int h = atomic_load(&pend_head);
  if (h - atomic_load(&pend_tail) >= PENDING) return;
  pend_sig[h % PENDING] = sig;
  pend_pid[h % PENDING] = info ? info->si_pid : 0;
  atomic_store(&pend_head, h + 1);
}

value rig_iso_catch_stop_signals(value unit)
{
  (void)unit;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  /* A child that dies with its pipes open must not kill the certifier. */
  signal(SIGPIPE, SIG_IGN);
  return Val_unit;
}

/* The next caught signal as (OCaml signal number, sender pid), or (0, 0). */
value rig_iso_next_stop_signal(value unit)
{
  CAMLparam1(unit);
  CAMLlocal1(res);
  int sig = 0, pid = 0;
  int t = atomic_load(&pend_tail);
  if (t < atomic_load(&pend_head)) {
    sig = pend_sig[t % PENDING];
    pid = pend_pid[t % PENDING];
    atomic_store(&pend_tail, t + 1);
  }
  res = caml_alloc_tuple(2);
  Store_field(res, 0, Val_int(sig ? caml_rev_convert_signal_number(sig) : 0));
  Store_field(res, 1, Val_int(pid));
  CAMLreturn(res);
}

/* ------------------------------------------------ the page of calls */

/* One slot per thread of the child that called into the driver: the
 * functions in flight on it, innermost last.  The certifier reads the page
 * after the child ended or was killed; a driver that scribbles on it only
 * spoils that evidence. */
#define TRACE_MAGIC 0x52494754u /* "RIGT" */
#define TRACE_SLOTS 128
#define TRACE_DEPTH 4
struct trace_slot {
  int32_t tid;
  int32_t depth;
  int32_t fns[TRACE_DEPTH];
  int64_t since[TRACE_DEPTH]; /* CLOCK_MONOTONIC ns at each call's start */
};
struct trace_page {
  uint32_t magic;
  atomic_int used;
  struct trace_slot slots[TRACE_SLOTS];
  /* bit fn set once any thread entered fn: what a run had called before a
   * crash, which its records never say */
  atomic_uint entered;
};

static struct trace_page *page;
static __thread int my_slot = -1;

value rig_iso_trace_create(value unit)
{
  (void)unit;
  int fd = memfd_create("rig-calls", MFD_CLOEXEC);
  if (fd < 0) uerror("memfd_create", Nothing);
  if (ftruncate(fd, sizeof(struct trace_page)) != 0) { close(fd); uerror("ftruncate", Nothing); }
  return Val_int(fd);
}

value rig_iso_trace_attach(value fd)
{
  void *p = mmap(NULL, sizeof(struct trace_page), PROT_READ | PROT_WRITE, MAP_SHARED, Int_val(fd), 0);
  close(Int_val(fd));
  if (p == MAP_FAILED) return Val_false;
  page = p;
  page->magic = TRACE_MAGIC;
  return Val_true;
}

static struct trace_slot *slot(void)
{
  if (page == NULL) return NULL;
  if (my_slot < 0) {
    int s = atomic_fetch_add(&page->used, 1);
    if (s >= TRACE_SLOTS) return NULL;
    my_slot = s;
    page->slots[s].tid = (int32_t)gettid();
  }
  return my_slot < TRACE_SLOTS ? &page->slots[my_slot] : NULL;
}

static int64_t monotonic_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Both [@@noalloc]: a traced call allocates nothing more than the driver's. */
value rig_iso_trace_enter(value fn)
{
  if (page != NULL && Int_val(fn) >= 0 && Int_val(fn) < 32)
    atomic_fetch_or_explicit(&page->entered, 1u << Int_val(fn), memory_order_relaxed);
  struct trace_slot *s = slot();
  if (s) {
    if (s->depth >= 0 && s->depth < TRACE_DEPTH) {
      s->since[s->depth] = monotonic_ns();
      s->fns[s->depth] = Int_val(fn);
    }
    s->depth++;
  }
  return Val_unit;
}

value rig_iso_trace_leave(value fn)
{
  (void)fn;
  struct trace_slot *s = slot();
  if (s && s->depth > 0) s->depth--;
  return Val_unit;
}

/* The calls in flight: a list of (tid, (fn, milliseconds in flight) list). */
value rig_iso_trace_read(value vfd)
{
  CAMLparam1(vfd);
  CAMLlocal4(res, cell, fns, pair);
  struct trace_page pg;
  res = Val_emptylist;
  ssize_t n = pread(Int_val(vfd), &pg, sizeof pg, 0);
  if (n != (ssize_t)sizeof pg || pg.magic != TRACE_MAGIC) CAMLreturn(res);
  int used = atomic_load(&pg.used);
  if (used > TRACE_SLOTS) used = TRACE_SLOTS;
  for (int i = used - 1; i >= 0; i--) {
    int d = pg.slots[i].depth;
    if (d <= 0) continue;
    if (d > TRACE_DEPTH) d = TRACE_DEPTH;
    fns = Val_emptylist;
    int64_t now = monotonic_ns();
    for (int k = d - 1; k >= 0; k--) {
      int64_t age = (now - pg.slots[i].since[k]) / 1000000;
      if (age < 0) age = 0;
      pair = caml_alloc_tuple(2);
      Store_field(pair, 0, Val_int(pg.slots[i].fns[k]));
      Store_field(pair, 1, Val_long(age));
      cell = caml_alloc_tuple(2);
      Store_field(cell, 0, pair);
      Store_field(cell, 1, fns);
      fns = cell;
    }
    pair = caml_alloc_tuple(2);
    Store_field(pair, 0, Val_int(pg.slots[i].tid));
    Store_field(pair, 1, fns);
    cell = caml_alloc_tuple(2);
    Store_field(cell, 0, pair);
    Store_field(cell, 1, res);
    res = cell;
  }
  CAMLreturn(res);
}

/* The functions entered so far, as a bit set by number. */
value rig_iso_trace_entered(value vfd)
{
  struct trace_page pg;
  ssize_t n = pread(Int_val(vfd), &pg, sizeof pg, 0);
  if (n != (ssize_t)sizeof pg || pg.magic != TRACE_MAGIC) return Val_int(0);
  return Val_long((intnat)atomic_load(&pg.entered));
}

/* ------------------------------------------------ the child's channel */

/* Writes one record whole (the certifier keeps records short enough for
 * one atomic pipe write); false when the channel is gone. */
value rig_iso_channel_write(value fd, value s)
{
  const char *p = String_val(s);
  size_t left = caml_string_length(s);
  while (left > 0) {
    ssize_t w = write(Int_val(fd), p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Val_false;
    p += w;
    left -= (size_t)w;
  }
  return Val_true;
}

value rig_iso_unsetenv(value name)
{
  unsetenv(String_val(name));
  return Val_unit;
}

/* Keeps a descriptor from programs the driver may exec. */
value rig_iso_cloexec(value fd)
{
  int flags = fcntl(Int_val(fd), F_GETFD);
  if (flags >= 0) fcntl(Int_val(fd), F_SETFD, flags | FD_CLOEXEC);
  return Val_unit;
}

value rig_iso_ocaml_signal(value s)
{
  return Val_int(caml_rev_convert_signal_number(Int_val(s)));
}
