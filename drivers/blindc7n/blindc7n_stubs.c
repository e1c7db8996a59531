/* blindc7n: a process-wide registry of prepared programs, keyed by string
 * (c7n-ok-creg, c7n-creg-gap).  A record holds the handle of an entry made
 * by hostmem's hm_entry (its scratch charged to the device's Device budget)
 * until entry takes it, or unload / a prepare's handler takes and frees it.
 *
 * The mutex is only held inside these functions, which run no OCaml code
 * and no signal handler: it is not one of the locks rig_hold counts.
 */
#include <pthread.h>
#include <string.h>
#define CAML_NAME_SPACE
#include <caml/memory.h>
#include <caml/mlvalues.h>

/* hostmem's stub (drivers/hostmem/hostmem_stubs.c), linked beside us. */
extern value hm_entry(value dev, value vfn, value vscratch);

#define REG_SLOTS 4096
#define REG_KEY 112
struct reg {
  int used;
  intnat h; /* 0: being made (c7n_reg_make) */
  char key[REG_KEY];
};
static struct reg reg[REG_SLOTS];
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

/* A slot recording [key] with handle 0, or -1 when the registry is full. */
static int reg_claim(value key) {
  size_t len = caml_string_length(key);
  if (len >= REG_KEY) return -1;
  int s = -1;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < REG_SLOTS; i++)
    if (!reg[i].used) {
      s = i;
      break;
    }
  if (s >= 0) {
    reg[s].used = 1;
    reg[s].h = 0;
    memcpy(reg[s].key, String_val(key), len);
    reg[s].key[len] = 0;
  }
  pthread_mutex_unlock(&reg_mu);
  return s;
}

static void reg_set(int s, intnat h) {
  pthread_mutex_lock(&reg_mu);
  if (h == 0) reg[s].used = 0;
  else reg[s].h = h;
  pthread_mutex_unlock(&reg_mu);
}

/* c7n_reg_put key h: records h under key; false when full. */
CAMLprim value c7n_reg_put(value key, value vh) {
  int s = reg_claim(key);
  if (s < 0) return Val_false;
  reg_set(s, Long_val(vh));
  return Val_true;
}

/* c7n_reg_take key: the handle recorded under key, removed; 0 if none. */
CAMLprim value c7n_reg_take(value key) {
  size_t len = caml_string_length(key);
  intnat h = 0;
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < REG_SLOTS; i++)
    if (reg[i].used && reg[i].h != 0 && strlen(reg[i].key) == len && memcmp(reg[i].key, String_val(key), len) == 0) {
      h = reg[i].h;
      reg[i].used = 0;
      break;
    }
  pthread_mutex_unlock(&reg_mu);
  return Val_long(h);
}

/* c7n_reg_make dev fn scratch key: makes the entry (hm_entry) and records
 * its handle under key in one C call, with no OCaml code between the two:
 * the handle (0: no memory, or the registry full; nothing made). */
CAMLprim value c7n_reg_make(value dev, value vfn, value vscratch, value key) {
  int s = reg_claim(key);
  if (s < 0) return Val_long(0);
  value h = hm_entry(dev, vfn, vscratch); /* an immediate; hm_entry allocates nothing */
  reg_set(s, Long_val(h));
  return h;
}
