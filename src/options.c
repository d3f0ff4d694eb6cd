/* options.c — getopt_long with one-line errors (options.h). */
#include "rnnd/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "rnnd/common.h"

int options_next(int argc, char **argv, const char *shorts, const struct option *longs, const char *program) {
  opterr = 0; /* our one line instead of getopt's */
  int c = getopt_long(argc, argv, shorts, longs, NULL);
  if (c == '?') {
    if (optopt && optopt < 256) rnnd_input_error("unknown option '-%c' (see %s --help)", optopt, program);
    rnnd_input_error("unknown option '%s' (see %s --help)", argv[optind - 1], program);
  }
  if (c == ':') rnnd_input_error("%s: missing value (see %s --help)", argv[optind - 1], program);
  if (c == -1 && optind < argc) rnnd_input_error("unexpected argument '%s' (see %s --help)", argv[optind], program);
  return c;
}

int options_int(const char *option, const char *text, int lo, int hi) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (*text == '\0' || *end || errno == ERANGE || v < lo || v > hi)
    rnnd_input_error("%s: expected an integer in [%d, %d], got '%s'", option, lo, hi, text);
  return (int)v;
}

double options_double(const char *option, const char *text, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (*text == '\0' || *end || errno == ERANGE || !isfinite(v))
    rnnd_input_error("%s: expected a number, got '%s'", option, text);
  if (v < lo || v > hi) rnnd_input_error("%s: %g is outside [%g, %g]", option, v, lo, hi);
  return v;
}

uint64_t options_u64(const char *option, const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (*text == '\0' || *text == '-' || *end || errno == ERANGE)
    rnnd_input_error("%s: expected a non-negative integer, got '%s'", option, text);
  return (uint64_t)v;
}
