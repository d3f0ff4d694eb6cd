/* prep_writer.c — rnn_prep's HDF5 writing (prep_writer.h). */
#include "prep_writer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK_ELEMENTS ((hsize_t)1 << 16)
#define DEFLATE_LEVEL 4

/* Abandons the temporary file so that no half-written output is left. */
void writer_fail(h5_writer *w, const char *fmt, ...) {
  char what[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(what, sizeof what, fmt, args);
  va_end(args);
  if (w->file >= 0) H5Fclose(w->file); /* best effort: we are failing anyway */
  remove(w->tmp_path);
  rnnd_input_error("%s: %s", w->tmp_path, what);
}

char *join_path(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = rnnd_malloc(n, "path");
  snprintf(path, n, "%s/%s", dir, name);
  return path;
}

void writer_open(h5_writer *w, const char *dir, const char *name) {
  w->file = -1;
  w->final_path = join_path(dir, name);
  size_t n = strlen(w->final_path) + 5;
  w->tmp_path = rnnd_malloc(n, "path");
  snprintf(w->tmp_path, n, "%s.tmp", w->final_path);
  /* HDF5 does not say why a create failed, so ask the OS first. */
  FILE *probe = fopen(w->tmp_path, "wb");
  if (!probe) rnnd_input_error("%s: cannot create (%s)", w->tmp_path, strerror(errno));
  fclose(probe);
  w->file = H5Fcreate(w->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  WCHECK(w, w->file, "cannot create HDF5 file");
}

void writer_commit(h5_writer *w) {
  herr_t closed = H5Fclose(w->file);
  w->file = -1;
  WCHECK(w, closed, "cannot finish writing the file");
  if (rename(w->tmp_path, w->final_path) != 0) {
    int err = errno;
    remove(w->tmp_path);
    rnnd_input_error("%s: cannot rename to %s (%s)", w->tmp_path, w->final_path, strerror(err));
  }
  free(w->final_path);
  free(w->tmp_path);
}

/* Writes a 1-D integer dataset, chunked, shuffled and deflated. */
void write_vector(h5_writer *w, const char *name, hid_t file_type, hid_t mem_type,
                         const void *data, hsize_t n) {
  hsize_t chunk = n < CHUNK_ELEMENTS ? n : CHUNK_ELEMENTS;
  hid_t space = H5Screate_simple(1, &n, NULL);
  WCHECK(w, space, "cannot create the dataspace of /%s", name);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  WCHECK(w, dcpl, "cannot create the properties of /%s", name);
  WCHECK(w, H5Pset_chunk(dcpl, 1, &chunk), "cannot set chunking of /%s", name);
  WCHECK(w, H5Pset_shuffle(dcpl), "cannot set the shuffle filter of /%s", name);
  WCHECK(w, H5Pset_deflate(dcpl, DEFLATE_LEVEL), "cannot set compression of /%s", name);
  hid_t dset = H5Dcreate2(w->file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  WCHECK(w, dset, "cannot create dataset /%s", name);
  WCHECK(w, H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
         "cannot write dataset /%s", name);
  WCHECK(w, H5Dclose(dset), "cannot close dataset /%s", name);
  WCHECK(w, H5Pclose(dcpl), "cannot close the properties of /%s", name);
  WCHECK(w, H5Sclose(space), "cannot close the dataspace of /%s", name);
}

/* Variable-length UTF-8 string type, for /vocab and the format attribute. */
hid_t utf8_string_type(h5_writer *w) {
  hid_t type = H5Tcopy(H5T_C_S1);
  WCHECK(w, type, "cannot create a string type");
  WCHECK(w, H5Tset_size(type, H5T_VARIABLE), "cannot create a string type");
  WCHECK(w, H5Tset_cset(type, H5T_CSET_UTF8), "cannot create a string type");
  return type;
}

/* A 1-D dataset of UTF-8 strings (/vocab, /label_names). */
void write_strings(h5_writer *w, const char *name, char *const *words, int32_t count) {
  hsize_t n = (hsize_t)count;
  hid_t type = utf8_string_type(w);
  hid_t space = H5Screate_simple(1, &n, NULL);
  WCHECK(w, space, "cannot create the dataspace of /%s", name);
  hid_t dset = H5Dcreate2(w->file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  WCHECK(w, dset, "cannot create dataset /%s", name);
  WCHECK(w, H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, words), "cannot write dataset /%s", name);
  WCHECK(w, H5Dclose(dset), "cannot close dataset /%s", name);
  WCHECK(w, H5Sclose(space), "cannot close the dataspace of /%s", name);
  WCHECK(w, H5Tclose(type), "cannot close a string type");
}

/* Writes a scalar root attribute of type TYPE from memory type MEM. */
void write_attribute(h5_writer *w, const char *name, hid_t type, hid_t mem,
                            const void *value) {
  hid_t space = H5Screate(H5S_SCALAR);
  WCHECK(w, space, "cannot create the dataspace of attribute %s", name);
  hid_t attr = H5Acreate2(w->file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  WCHECK(w, attr, "cannot create attribute %s", name);
  WCHECK(w, H5Awrite(attr, mem, value), "cannot write attribute %s", name);
  WCHECK(w, H5Aclose(attr), "cannot close attribute %s", name);
  WCHECK(w, H5Sclose(space), "cannot close the dataspace of attribute %s", name);
}

void write_int_attribute(h5_writer *w, const char *name, int32_t value) {
  write_attribute(w, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

/* mkdir -p: creates DIR and any missing parents. */
void make_directories(const char *dir) {
  char *path = rnnd_strdup(dir);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      rnnd_input_error("%s: cannot create directory (%s)", path, strerror(errno));
    *p = saved;
    if (saved == '\0') break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    rnnd_input_error("%s: not a directory", dir);
  free(path);
}
