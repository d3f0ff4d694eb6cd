/* options.h — the command lines of rnn_dist's programs (rnn_dist's verbs,
 * rnn_prep, bench_train), parsed with getopt_long: `--opt value` and
 * `--opt=value` alike, and every mistake one line (exit 2): an unknown
 * option, a missing value, a stray argument or a value of the wrong kind,
 * each named, with a pointer to --help. */
#ifndef RNND_OPTIONS_H
#define RNND_OPTIONS_H

#include <getopt.h>
#include <stdint.h>

/* The next option's `val` from getopt_long(argc, argv, shorts, longs), -1
 * at the end; `shorts` must start with ':'. Unknown options and missing
 * values end in rnnd_input_error ("unknown option '--x' (see PROGRAM
 * --help)"). After -1, arguments that are no option end the same way. */
int options_next(int argc, char **argv, const char *shorts, const struct option *longs, const char *program);

/* Values, checked: `option` names the option in the error line. */
int options_int(const char *option, const char *text, int lo, int hi);
double options_double(const char *option, const char *text, double lo, double hi);
uint64_t options_u64(const char *option, const char *text);

#endif
