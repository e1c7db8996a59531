/* C_locks: which lock functions a plugin's own C code calls, and when.
 *
 * A plugin's C code reaches pthread_mutex_lock and its kin through its
 * global offset table.  After the plugin loads, the slots of those
 * functions in every object that appeared during the load are pointed at
 * wrappers here, which count a call made while the calling thread watches
 * (rig_c_locks_watch_begin .. _end) and then call the real function.  The
 * program's own code (the OCaml runtime, the harness, a driver linked in)
 * is not redirected: its locks are never counted. */

#define _GNU_SOURCE
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <threads.h>
#include <unistd.h>

static __thread int watch_depth;
static __thread int taken;
static __thread const char *first_taken;

static void note(const char *fn) {
  if (watch_depth > 0 && taken++ == 0) first_taken = fn;
}

static int w_mutex_lock(pthread_mutex_t *m) { note("pthread_mutex_lock"); return pthread_mutex_lock(m); }
static int w_mutex_trylock(pthread_mutex_t *m) { note("pthread_mutex_trylock"); return pthread_mutex_trylock(m); }
static int w_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) {
  note("pthread_mutex_timedlock");
  return pthread_mutex_timedlock(m, t);
}
static int w_rw_rdlock(pthread_rwlock_t *l) { note("pthread_rwlock_rdlock"); return pthread_rwlock_rdlock(l); }
static int w_rw_wrlock(pthread_rwlock_t *l) { note("pthread_rwlock_wrlock"); return pthread_rwlock_wrlock(l); }
static int w_rw_tryrdlock(pthread_rwlock_t *l) { note("pthread_rwlock_tryrdlock"); return pthread_rwlock_tryrdlock(l); }
static int w_rw_trywrlock(pthread_rwlock_t *l) { note("pthread_rwlock_trywrlock"); return pthread_rwlock_trywrlock(l); }
static int w_rw_timedrdlock(pthread_rwlock_t *l, const struct timespec *t) {
  note("pthread_rwlock_timedrdlock");
  return pthread_rwlock_timedrdlock(l, t);
}
static int w_rw_timedwrlock(pthread_rwlock_t *l, const struct timespec *t) {
  note("pthread_rwlock_timedwrlock");
  return pthread_rwlock_timedwrlock(l, t);
}
static int w_spin_lock(pthread_spinlock_t *s) { note("pthread_spin_lock"); return pthread_spin_lock(s); }
static int w_spin_trylock(pthread_spinlock_t *s) { note("pthread_spin_trylock"); return pthread_spin_trylock(s); }
static int w_mtx_lock(mtx_t *m) { note("mtx_lock"); return mtx_lock(m); }
static int w_mtx_trylock(mtx_t *m) { note("mtx_trylock"); return mtx_trylock(m); }
static int w_mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict t) {
  note("mtx_timedlock");
  return mtx_timedlock(m, t);
}
static int w_sem_wait(sem_t *s) { note("sem_wait"); return sem_wait(s); }
static int w_sem_trywait(sem_t *s) { note("sem_trywait"); return sem_trywait(s); }
static int w_sem_timedwait(sem_t *s, const struct timespec *t) { note("sem_timedwait"); return sem_timedwait(s, t); }

static const struct {
  const char *name;
  void *wrapper;
} wrapped[] = {
    {"pthread_mutex_lock", (void *)w_mutex_lock},
    {"pthread_mutex_trylock", (void *)w_mutex_trylock},
    {"pthread_mutex_timedlock", (void *)w_mutex_timedlock},
    {"pthread_rwlock_rdlock", (void *)w_rw_rdlock},
    {"pthread_rwlock_wrlock", (void *)w_rw_wrlock},
    {"pthread_rwlock_tryrdlock", (void *)w_rw_tryrdlock},
    {"pthread_rwlock_trywrlock", (void *)w_rw_trywrlock},
    {"pthread_rwlock_timedrdlock", (void *)w_rw_timedrdlock},
    {"pthread_rwlock_timedwrlock", (void *)w_rw_timedwrlock},
    {"pthread_spin_lock", (void *)w_spin_lock},
    {"pthread_spin_trylock", (void *)w_spin_trylock},
    {"mtx_lock", (void *)w_mtx_lock},
    {"mtx_trylock", (void *)w_mtx_trylock},
    {"mtx_timedlock", (void *)w_mtx_timedlock},
    {"sem_wait", (void *)w_sem_wait},
    {"sem_trywait", (void *)w_sem_trywait},
    {"sem_timedwait", (void *)w_sem_timedwait},
};

/* The objects loaded before the plugin, by base address and name. */
#define MAX_OBJECTS 1024
static struct {
  ElfW(Addr) base;
  char name[256];
} before[MAX_OBJECTS];
static int n_before;

static int note_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (n_before < MAX_OBJECTS) {
    before[n_before].base = info->dlpi_addr;
    strncpy(before[n_before].name, info->dlpi_name ? info->dlpi_name : "", sizeof before[0].name - 1);
    before[n_before].name[sizeof before[0].name - 1] = 0;
    n_before++;
  }
  return 0;
}

static int was_loaded_before(const struct dl_phdr_info *info) {
  for (int i = 0; i < n_before; i++)
    if (before[i].base == info->dlpi_addr && strncmp(before[i].name, info->dlpi_name ? info->dlpi_name : "", sizeof before[0].name - 1) == 0)
      return 1;
  return 0;
}

#if defined(__x86_64__)
#define SLOT_RELOC(t) ((t) == 7 /* R_X86_64_JUMP_SLOT */ || (t) == 6 /* R_X86_64_GLOB_DAT */)
#elif defined(__aarch64__)
#define SLOT_RELOC(t) ((t) == 1026 /* R_AARCH64_JUMP_SLOT */ || (t) == 1025 /* R_AARCH64_GLOB_DAT */)
#endif

#ifdef SLOT_RELOC
/* Points one slot at [wrapper], making its page writable for the write
 * (RELRO left it read-only) and read-only again if it was in RELRO. */
static void redirect(ElfW(Addr) slot, void *wrapper, ElfW(Addr) relro_lo, ElfW(Addr) relro_hi) {
  long page = sysconf(_SC_PAGESIZE);
  void *p = (void *)(slot & ~(ElfW(Addr))(page - 1));
  int in_relro = slot >= relro_lo && slot < relro_hi;
  if (in_relro && mprotect(p, page, PROT_READ | PROT_WRITE) != 0) return;
  __atomic_store_n((void **)slot, wrapper, __ATOMIC_RELEASE);
  if (in_relro) mprotect(p, page, PROT_READ);
}

static void redirect_relocs(ElfW(Addr) base, const ElfW(Rela) *r, size_t bytes, const ElfW(Sym) *symtab, const char *strtab,
                            ElfW(Addr) relro_lo, ElfW(Addr) relro_hi) {
  for (size_t i = 0; i < bytes / sizeof *r; i++) {
    if (!SLOT_RELOC(ELF64_R_TYPE(r[i].r_info))) continue;
    const char *name = strtab + symtab[ELF64_R_SYM(r[i].r_info)].st_name;
    for (size_t k = 0; k < sizeof wrapped / sizeof wrapped[0]; k++)
      if (strcmp(name, wrapped[k].name) == 0) redirect(base + r[i].r_offset, wrapped[k].wrapper, relro_lo, relro_hi);
  }
}

static int redirect_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (was_loaded_before(info) || info->dlpi_addr == 0) return 0;
  const ElfW(Dyn) *dyn = NULL;
  ElfW(Addr) relro_lo = 0, relro_hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
    if (ph->p_type == PT_GNU_RELRO) {
      relro_lo = info->dlpi_addr + ph->p_vaddr;
      relro_hi = relro_lo + ph->p_memsz;
    }
  }
  if (dyn == NULL) return 0;
  /* ld.so relocates these addresses in place on some targets, not on
   * others: an address below the base is still relative. */
#define ADDR(d) ((d)->d_un.d_ptr < info->dlpi_addr ? info->dlpi_addr + (d)->d_un.d_ptr : (d)->d_un.d_ptr)
  const ElfW(Sym) *symtab = NULL;
  const char *strtab = NULL;
  const ElfW(Rela) *jmprel = NULL, *rela = NULL;
  size_t jmprel_bytes = 0, rela_bytes = 0;
  int plt_is_rela = 1;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) switch (d->d_tag) {
      case DT_SYMTAB: symtab = (const ElfW(Sym) *)ADDR(d); break;
      case DT_STRTAB: strtab = (const char *)ADDR(d); break;
      case DT_JMPREL: jmprel = (const ElfW(Rela) *)ADDR(d); break;
      case DT_PLTRELSZ: jmprel_bytes = d->d_un.d_val; break;
      case DT_PLTREL: plt_is_rela = d->d_un.d_val == DT_RELA; break;
      case DT_RELA: rela = (const ElfW(Rela) *)ADDR(d); break;
      case DT_RELASZ: rela_bytes = d->d_un.d_val; break;
    }
#undef ADDR
  if (symtab == NULL || strtab == NULL) return 0;
  if (jmprel != NULL && plt_is_rela) redirect_relocs(info->dlpi_addr, jmprel, jmprel_bytes, symtab, strtab, relro_lo, relro_hi);
  if (rela != NULL) redirect_relocs(info->dlpi_addr, rela, rela_bytes, symtab, strtab, relro_lo, relro_hi);
  return 0;
}
#endif

CAMLprim value rig_c_locks_before_load(value unit) {
  (void)unit;
  n_before = 0;
  dl_iterate_phdr(note_object, NULL);
  return Val_unit;
}

CAMLprim value rig_c_locks_after_load(value unit) {
  (void)unit;
#ifdef SLOT_RELOC
  dl_iterate_phdr(redirect_object, NULL);
#endif
  return Val_unit;
}

CAMLprim value rig_c_locks_watch_begin(value unit) {
  (void)unit;
  if (watch_depth++ == 0) {
    taken = 0;
    first_taken = NULL;
  }
  return Val_unit;
}

CAMLprim value rig_c_locks_watch_end(value unit) {
  (void)unit;
  if (watch_depth > 0) watch_depth--;
  return Val_int(taken);
}

CAMLprim value rig_c_locks_first_taken(value unit) {
  (void)unit;
  return caml_copy_string(first_taken ? first_taken : "");
}
