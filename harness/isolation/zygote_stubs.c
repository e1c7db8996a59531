/* The zygote's process machinery (see zygote.mli): requests with
 * descriptors over a Unix socket, and a child made by the zygote that is
 * the certifier's own child (clone with CLONE_PARENT), set up as
 * rig_iso_spawn sets up an executed one. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/unixsupport.h>

/* Exported by the runtime, declared only under CAML_INTERNALS: what
 * Unix.fork runs in a child (the systhreads' tables reset to this thread). */
CAMLextern void (*caml_atfork_hook)(void);
CAMLextern intnat caml_domain_is_multicore(void);

#define MAX_FDS 8

static int send_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int recv_all(int fd, char *p, size_t n)
{
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* rig_zyg_send sock payload fds: the payload's length (8 bytes) with fds
 * attached, then the payload.  false when the zygote is gone (no SIGPIPE). */
value rig_zyg_send(value sock, value payload, value fds)
{
  CAMLparam3(sock, payload, fds);
  int n = (int)Wosize_val(fds);
  if (n > MAX_FDS) caml_invalid_argument("Zygote.send: too many descriptors");
  uint64_t len = caml_string_length(payload);
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  memset(control, 0, sizeof control);
  struct iovec iov = { .iov_base = &len, .iov_len = sizeof len };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                        .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * n);
  for (int i = 0; i < n; i++) ((int *)CMSG_DATA(c))[i] = Int_val(Field(fds, i));
  ssize_t k;
  do k = sendmsg(Int_val(sock), &msg, MSG_NOSIGNAL); while (k < 0 && errno == EINTR);
  int ok = k == (ssize_t)sizeof len
           && send_all(Int_val(sock), String_val(payload), len) == 0;
  CAMLreturn(Val_bool(ok));
}

/* rig_zyg_receive sock: (payload, fds) of the next request; raises
 * End_of_file when the certifier is gone or sent something else. */
value rig_zyg_receive(value sock)
{
  CAMLparam1(sock);
  CAMLlocal3(res, payload, fds);
  uint64_t len = 0;
  char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  struct iovec iov = { .iov_base = &len, .iov_len = sizeof len };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control };
  ssize_t k;
  do k = recvmsg(Int_val(sock), &msg, MSG_CMSG_CLOEXEC); while (k < 0 && errno == EINTR);
  if (k != (ssize_t)sizeof len || len > (1u << 26)) caml_raise_end_of_file();
  int got[MAX_FDS], n = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && n < MAX_FDS; i++)
        got[n++] = ((int *)CMSG_DATA(c))[i];
  payload = caml_alloc_string(len);
  if (recv_all(Int_val(sock), (char *)Bytes_val(payload), len) != 0) {
    for (int i = 0; i < n; i++) close(got[i]);
    caml_raise_end_of_file();
  }
  fds = caml_alloc_tuple(n);
  for (int i = 0; i < n; i++) Store_field(fds, i, Val_int(got[i]));
  res = caml_alloc_tuple(2);
  Store_field(res, 0, payload);
  Store_field(res, 1, fds);
  CAMLreturn(res);
}

/* rig_zyg_fork fds: a child of this process's parent (CLONE_PARENT), in a
 * process group of its own, stdin from /dev/null, fds.(i) as its descriptor
 * i + 1, every other descriptor closed: as rig_iso_spawn leaves an executed
 * child, whose state (dispositions, mask) the zygote has as it never
 * changed it.  Answers 0 in the child, its pid here; -1 when the zygote is
 * not alone (a thread or a domain: a copy would miss it). */
value rig_zyg_fork(value fds)
{
  CAMLparam1(fds);
  int n = (int)Wosize_val(fds);
  if (caml_domain_is_multicore()) CAMLreturn(Val_int(-1));
  pid_t pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
  if (pid < 0) uerror("clone", Nothing);
  if (pid > 0) CAMLreturn(Val_int(pid));
  caml_atfork_hook();
  setpgid(0, 0);
  int base = 64, devnull = open("/dev/null", O_RDONLY);
  for (int i = 0; i < n; i++) base = Int_val(Field(fds, i)) >= base ? Int_val(Field(fds, i)) + 1 : base;
  /* Through descriptors above every source and target, as rig_iso_spawn. */
  for (int i = 0; i < n; i++) dup2(Int_val(Field(fds, i)), base + i);
  for (int i = 0; i < n; i++) dup2(base + i, i + 1);
  if (devnull >= 0) { dup2(devnull, 0); }
  for (int fd = n + 1; fd < base + n; fd++) close(fd);
  if (syscall(SYS_close_range, (unsigned)(base + n), ~0u, 0) != 0)
    for (int fd = base + n; fd < 4096; fd++) close(fd);
  CAMLreturn(Val_int(0));
}

/* rig_zyg_set_environment envp: the process's environment, replaced. */
value rig_zyg_set_environment(value envp)
{
  CAMLparam1(envp);
  clearenv();
  for (mlsize_t i = 0; i < Wosize_val(envp); i++) {
    char *kv = strdup(String_val(Field(envp, i)));
    if (kv != NULL) putenv(kv);
  }
  CAMLreturn(Val_unit);
}
