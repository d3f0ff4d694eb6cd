/* label_table.c — class names of classification data (label_table.h). */
#include "rnnd/label_table.h"

#include <stdlib.h>
#include <string.h>

#include "rnnd/common.h"

void label_table_init(label_table *t) { memset(t, 0, sizeof *t); }

/* Compares a name of n bytes with a NUL-terminated one, in byte order. */
static int compare_name(const char *name, size_t n, const char *other) {
  size_t m = strlen(other);
  int c = memcmp(name, other, n < m ? n : m);
  return c ? c : (n > m) - (n < m);
}

/* Before finish the names are few and unsorted: a linear scan. */
void label_table_add(label_table *t, const char *name, size_t n) {
  RNND_ASSERT(!t->finished);
  for (int32_t i = 0; i < t->count; i++)
    if (compare_name(name, n, t->names[i]) == 0) return;
  if (t->count == INT32_MAX) rnnd_input_error("more than 2^31 distinct labels");
  if (t->count == t->capacity) {
    t->capacity = t->capacity ? t->capacity * 2 : 16;
    char **grown = realloc(t->names, (size_t)t->capacity * sizeof *grown);
    if (!grown) RNND_FAIL("out of memory growing the label table");
    t->names = grown;
  }
  char *copy = rnnd_malloc(n + 1, "label");
  memcpy(copy, name, n);
  copy[n] = '\0';
  t->names[t->count++] = copy;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void label_table_finish(label_table *t) {
  if (t->count) qsort(t->names, (size_t)t->count, sizeof *t->names, by_name);
  t->finished = 1;
}

int32_t label_table_find(const label_table *t, const char *name, size_t n) {
  RNND_ASSERT(t->finished);
  int32_t lo = 0, hi = t->count;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    int c = compare_name(name, n, t->names[mid]);
    if (c == 0) return mid;
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return -1;
}

void label_table_free(label_table *t) {
  for (int32_t i = 0; i < t->count; i++) free(t->names[i]);
  free(t->names);
  memset(t, 0, sizeof *t);
}
