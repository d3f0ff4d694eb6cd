/* label_table.h — the class names of a classification data set (rnn_prep
 * --labels): collected from the training text, then numbered in byte order
 * of their names, so the ids do not depend on the order of the lines.
 *
 * Ownership: label_table_init, then label_table_free releases the names. */
#ifndef RNND_LABEL_TABLE_H
#define RNND_LABEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char **names;  /* [count], owned; sorted after label_table_finish */
  int32_t count;
  int32_t capacity;
  int finished;
} label_table;

void label_table_init(label_table *t);
/* Adds a name (n bytes, not NUL-terminated) unless it is already there. */
void label_table_add(label_table *t, const char *name, size_t n);
/* Sorts the names; ids are positions from now on. */
void label_table_finish(label_table *t);
/* Id of a name, or -1 if the table does not have it (after finish). */
int32_t label_table_find(const label_table *t, const char *name, size_t n);
void label_table_free(label_table *t);

#endif
