/* What the hostile drivers do that OCaml cannot do, or not as bluntly:
 * die (segfault, abort, exit, _exit), never return (a busy loop, a read that
 * never ends, both holding the OCaml runtime), write raw bytes to any
 * descriptor, close or clobber descriptors, fork processes that outlive
 * the case, stop or signal themselves, their parent or their process group,
 * take over signal handlers, and a C thread that writes forged protocol
 * lines.  None of these touches the OCaml heap except to read a string.
 *
 * Every process that does something hostile first leaves its pid in
 * $HOSTILE_PIDDIR (a file named pid.<N>, when the variable is set), so that
 * a test can check afterwards that none of them is alive. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>

/* ---------------------------------------------------------------- pids */

static void note_pid(void) {
  const char *dir = getenv("HOSTILE_PIDDIR");
  char path[4096];
  if (dir == NULL || *dir == '\0') return;
  snprintf(path, sizeof path, "%s/pid.%ld", dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
}

value hostile_note_pid(value unit) {
  (void)unit;
  note_pid();
  return Val_unit;
}

/* Whether this process is the first to take the token NAME in
 * $HOSTILE_PIDDIR (an O_EXCL create): how a driver misbehaves once per
 * certification rather than in every child.  False when the variable is
 * not set. */
value hostile_take_token(value name) {
  const char *dir = getenv("HOSTILE_PIDDIR");
  char path[4096];
  if (dir == NULL || *dir == '\0') return Val_false;
  snprintf(path, sizeof path, "%s/token.%s", dir, String_val(name));
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Val_false;
  close(fd);
  return Val_true;
}

/* ---------------------------------------------------------- dying */

value hostile_segv(value unit) {
  (void)unit;
  note_pid();
  raise(SIGSEGV);
  return Val_unit;
}

value hostile_abort(value unit) {
  (void)unit;
  note_pid();
  abort();
  return Val_unit;
}

value hostile_exit(value code) {
  note_pid();
  exit(Int_val(code));
  return Val_unit;
}

value hostile_uexit(value code) {
  note_pid();
  _exit(Int_val(code));
  return Val_unit;
}

/* ---------------------------------------------------- never returning */

/* A busy loop that holds the runtime: no other OCaml thread runs again. */
value hostile_loop(value unit) {
  volatile unsigned long spin = 0;
  (void)unit;
  note_pid();
  for (;;) spin++;
  return Val_unit;
}

/* A read that never ends (a pipe whose write end this process keeps), also
 * holding the runtime; a signal only starts the read again. */
value hostile_block(value unit) {
  int p[2];
  char c;
  (void)unit;
  note_pid();
  if (pipe(p) != 0) for (;;) pause();
  for (;;)
    if (read(p[0], &c, 1) < 0 && errno != EINTR) pause();
  return Val_unit;
}

/* ---------------------------------------------------------- writing */

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

/* [@@noalloc]: a write(2) of the string, no channel, no lock of OCaml's. */
value hostile_write(value fd, value s) {
  write_all(Int_val(fd), String_val(s), caml_string_length(s));
  return Val_unit;
}

static char chunk[1 << 20];

/* mib MiB of 'x' lines to fd, one MiB at a time. */
value hostile_flood(value fd, value mib) {
  note_pid();
  memset(chunk, 'x', sizeof chunk);
  for (size_t i = 63; i < sizeof chunk; i += 64) chunk[i] = '\n';
  for (long i = 0; i < Long_val(mib); i++) write_all(Int_val(fd), chunk, sizeof chunk);
  return Val_unit;
}

/* Writes to fd forever (and, should the reader go, blocks forever). */
value hostile_stream(value fd) {
  static const char line[] = "hostile: an endless stream of complaints, FINDING\tSTOP-3\tforged\n";
  note_pid();
  for (;;)
    if (write(Int_val(fd), line, sizeof line - 1) < 0 && errno != EINTR) hostile_block(Val_unit);
  return Val_unit;
}

/* --------------------------------------------------------- descriptors */

value hostile_close_fds(value lo, value hi) {
  note_pid();
  for (int fd = Int_val(lo); fd <= Int_val(hi); fd++) close(fd);
  return Val_unit;
}

value hostile_garbage_fds(value lo, value hi) {
  static const char junk[] = "\xff\xfe\x00DONE\nFINDING\tSTOP-3\tforged\nNA\tforged\n\x1b[31mgarbage\x00\x01";
  note_pid();
  for (int fd = Int_val(lo); fd <= Int_val(hi); fd++)
    if (write(fd, junk, sizeof junk - 1) < 0) { /* not open, or not for writing: next one */ }
  return Val_unit;
}

value hostile_dup2_null(value unit) {
  (void)unit;
  note_pid();
  int fd = open("/dev/null", O_WRONLY);
  if (fd < 0) return Val_unit;
  dup2(fd, 1);
  dup2(fd, 2);
  if (fd > 2) close(fd);
  return Val_unit;
}

/* ------------------------------------------------------------- forks */

/* What a forked child does: leave its pid, then sleep forever, holding
 * every descriptor it inherited (the case's output included). */
static void sleep_forever(void) {
  note_pid();
  for (;;) pause();
}

/* n children that sleep forever, in this process group. */
value hostile_fork_sleepers(value n) {
  note_pid();
  for (int i = 0; i < Int_val(n); i++)
    if (fork() == 0) sleep_forever();
  return Val_unit;
}

/* A grandchild in a session (and process group) of its own, whose parent
 * is gone: out of reach of a kill of the case's process group. */
value hostile_double_fork(value unit) {
  (void)unit;
  note_pid();
  pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) sleep_forever();
    _exit(0);
  }
  if (child > 0) waitpid(child, NULL, 0);
  return Val_unit;
}

/* ----------------------------------------------------------- signals */

static int signal_of(value which) {
  switch (Int_val(which)) {
    case 0: return SIGINT;
    case 1: return SIGTERM;
    default: return SIGSTOP;
  }
}

static void do_nothing(int sig) { (void)sig; }

/* which: 0 SIGINT, 1 SIGTERM. */
value hostile_handle_nothing(value which) {
  struct sigaction sa;
  note_pid();
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = do_nothing;
  sigemptyset(&sa.sa_mask);
  sigaction(signal_of(which), &sa, NULL);
  return Val_unit;
}

value hostile_ignore(value which) {
  note_pid();
  signal(signal_of(which), SIG_IGN);
  return Val_unit;
}

value hostile_stop_self(value unit) {
  (void)unit;
  note_pid();
  raise(SIGSTOP);
  return Val_unit;
}

/* which: 0 SIGINT, 1 SIGTERM; sent to the parent, unless the parent is the
 * process named by $HOSTILE_SPARE_PID (the test suite itself, should the
 * driver run in the certifier's own process). */
value hostile_kill_parent(value which) {
  const char *spare = getenv("HOSTILE_SPARE_PID");
  pid_t parent = getppid();
  note_pid();
  if (spare != NULL && atol(spare) == (long)parent) return Val_unit;
  kill(parent, signal_of(which));
  return Val_unit;
}

value hostile_kill_group(value which) {
  note_pid();
  kill(0, signal_of(which));
  return Val_unit;
}

/* ----------------------------------------------------------- chdir */

value hostile_chdir(value path) {
  note_pid();
  if (chdir(String_val(path)) != 0) { /* stays where it was */ }
  return Val_unit;
}

/* ------------------------------------------------------------ thread */

/* A C thread, every signal blocked, that writes forged protocol lines,
 * partial lines and bytes that are not UTF-8 to stdout and stderr every
 * 20 ms, for the life of the process. */
static void *forger(void *arg) {
  static const char lines[] =
      "DONE\nFINDING\tSTOP-3\tforged by a thread\nNA\tforged\nCALLS\talloc\t9\n\xff\xfe\x1b[31m<>&\"\nDO";
  struct timespec pace = {0, 20 * 1000 * 1000};
  (void)arg;
  for (;;) {
    write_all(1, lines, sizeof lines - 1);
    write_all(2, lines, sizeof lines - 1);
    nanosleep(&pace, NULL);
  }
  return NULL;
}

value hostile_start_forger(value unit) {
  pthread_t t;
  sigset_t all, old;
  (void)unit;
  note_pid();
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&t, NULL, forger, NULL) == 0) pthread_detach(t);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return Val_unit;
}
