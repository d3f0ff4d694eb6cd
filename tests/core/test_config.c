/* test_config.c — the INI parser: defaults, comments and whitespace,
 * overrides after the file, derived data paths, "none", and that the
 * resolved configuration written by config_write reads back identically.
 * usage: test_config GOOD.ini SCRATCH_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnnd/config.h"

static int failures, checks;
#define EXPECT(cond)                                                   \
  do {                                                                 \
    checks++;                                                          \
    if (!(cond)) {                                                     \
      failures++;                                                      \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
    }                                                                  \
  } while (0)

static char *written(const rnnd_config *cfg, const char *path) {
  FILE *f = fopen(path, "w+");
  config_write(cfg, f);
  long n = ftell(f);
  rewind(f);
  char *text = calloc((size_t)n + 1, 1);
  if (fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = '\0';
  fclose(f);
  return text;
}

int main(int argc, char **argv) {
  if (argc != 3) return fprintf(stderr, "usage: test_config GOOD.ini SCRATCH_DIR\n"), 2;
  rnnd_config cfg;
  config_init_defaults(&cfg);
  EXPECT(cfg.model.cell == RNND_CELL_GRU && cfg.model.layers == 2 && cfg.model.hidden == 256);
  EXPECT(cfg.train.clip_norm == 0.5 && cfg.train.lr == 0.001 && cfg.train.global_batch == 32);
  EXPECT(!strcmp(cfg.data.buckets, "auto") && !strcmp(cfg.output.dir, "runs/default"));

  config_load_file(&cfg, argv[1]);
  config_apply_override(&cfg, "model.layers=4");
  config_apply_override(&cfg, " train.seed = 77 ");
  config_finalize(&cfg);
  EXPECT(cfg.model.cell == RNND_CELL_LSTM && cfg.model.hidden == 48 && cfg.model.bidirectional == 1);
  EXPECT(cfg.model.layers == 4);            /* --set wins over the file */
  EXPECT(cfg.train.seed == 77 && cfg.train.lr == 2.5e-3 && cfg.train.lr_schedule == RNND_LR_COSINE);
  EXPECT(!strcmp(cfg.data.train, "some/dir/train.h5"));
  EXPECT(!strcmp(cfg.data.valid, ""));      /* none = no validation */
  EXPECT(!strcmp(cfg.data.test, "some/dir/test.h5"));

  char first[4096], second[4096];
  snprintf(first, sizeof first, "%s/first.ini", argv[2]);
  snprintf(second, sizeof second, "%s/second.ini", argv[2]);
  char *text = written(&cfg, first);
  rnnd_config again;
  config_init_defaults(&again);
  config_load_file(&again, first);
  config_finalize(&again);
  char *text_again = written(&again, second);
  EXPECT(!strcmp(text, text_again));
  EXPECT(strstr(text, "[model]\ncell = lstm\n") != NULL);

  EXPECT(rnnd_edit_distance("hiden", "hidden") == 1);
  EXPECT(rnnd_edit_distance("", "abc") == 3);
  EXPECT(rnnd_edit_distance("kitten", "sitting") == 3);
  free(text);
  free(text_again);
  config_free(&cfg);
  config_free(&again);
  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
