/* csv_table.h — a CSV file of time series, as rnn_prep --csv and
 * `rnn_dist predict` read it: a header line of column names, then one row
 * per time step. Every column is a real-valued feature, except an optional
 * `series_id` column: consecutive rows with the same id form one series (a
 * new id starts the next); without it the whole file is one series. Blank
 * lines are skipped. A non-number, a wrong field count, an unnamed column
 * or an empty file is one line naming the file, line and column (exit 2).
 *
 * Ownership: csv_table_read fills the table; csv_table_free releases it. */
#ifndef RNND_CSV_TABLE_H
#define RNND_CSV_TABLE_H

#include <stdint.h>

#define RNND_CSV_SERIES_COLUMN "series_id"

typedef struct {
  const char *path;
  char **names;       /* feature columns, in file order */
  int n_features;
  int n_columns;      /* features + the series_id column if present */
  int series_column;  /* -1: none */
  float *values;      /* [rows, n_features] */
  int64_t rows, cap_rows;
  int64_t *offsets;   /* [n_series + 1] */
  char **series_ids;  /* [n_series] each series' series_id ("" without the column) */
  int64_t n_series, cap_series;
} csv_table;

void csv_table_read(csv_table *t, const char *path);
void csv_table_free(csv_table *t);

#endif
