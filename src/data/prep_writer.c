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
  for (int i = 0; i < w->group_size; i++)
    if (&w->group[i] != w && w->group[i].tmp_path) remove(w->group[i].tmp_path);
  rnnd_input_error("%s: %s", w->tmp_path, what);
}

char *join_path(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = rnnd_malloc(n, "path");
  snprintf(path, n, "%s/%s", dir, name);
  return path;
}

static void open_tmp(h5_writer *w, const char *dir, const char *name) {
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

void writer_open(h5_writer *w, const char *dir, const char *name) {
  w->group = NULL, w->group_size = 0;
  open_tmp(w, dir, name);
}

void writer_open_in_group(h5_writer *w, const char *dir, const char *name, h5_writer *group, int size) {
  w->group = group, w->group_size = size;
  open_tmp(w, dir, name);
}

void writer_finish(h5_writer *w) {
  herr_t closed = H5Fclose(w->file);
  w->file = -1;
  WCHECK(w, closed, "cannot finish writing the file");
}

void writer_rename(h5_writer *w) {
  if (rename(w->tmp_path, w->final_path) != 0) writer_fail(w, "cannot rename to %s (%s)", w->final_path, strerror(errno));
  free(w->final_path);
  free(w->tmp_path);
  w->final_path = w->tmp_path = NULL;
}

void writer_commit(h5_writer *w) {
  writer_finish(w);
  writer_rename(w);
}

void appender_open(h5_appender *a, h5_writer *w, const char *name, hid_t file_type, hid_t mem_type, hsize_t chunk,
                   int deflate) {
  *a = (h5_appender){.w = w, .name = name, .mem_type = mem_type};
  hsize_t zero = 0, unlimited = H5S_UNLIMITED;
  hid_t space = H5Screate_simple(1, &zero, &unlimited);
  WCHECK(w, space, "cannot create the dataspace of /%s", name);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  WCHECK(w, dcpl, "cannot create the properties of /%s", name);
  WCHECK(w, H5Pset_chunk(dcpl, 1, &chunk), "cannot set chunking of /%s", name);
  if (deflate > 0) {
    WCHECK(w, H5Pset_shuffle(dcpl), "cannot set the shuffle filter of /%s", name);
    WCHECK(w, H5Pset_deflate(dcpl, (unsigned)deflate), "cannot set compression of /%s", name);
  }
  a->dset = H5Dcreate2(w->file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  WCHECK(w, a->dset, "cannot create dataset /%s", name);
  WCHECK(w, H5Pclose(dcpl), "cannot close the properties of /%s", name);
  WCHECK(w, H5Sclose(space), "cannot close the dataspace of /%s", name);
}

void appender_add(h5_appender *a, const void *data, size_t n) {
  if (n == 0) return;
  hsize_t count = n, total = a->n + count;
  WCHECK(a->w, H5Dset_extent(a->dset, &total), "cannot grow /%s to %llu entries", a->name, (unsigned long long)total);
  hid_t file_space = H5Dget_space(a->dset), mem_space = H5Screate_simple(1, &count, NULL);
  WCHECK(a->w, file_space, "cannot get the dataspace of /%s", a->name);
  WCHECK(a->w, mem_space, "cannot create a dataspace for /%s", a->name);
  WCHECK(a->w, H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &a->n, NULL, &count, NULL),
         "cannot select entries of /%s", a->name);
  WCHECK(a->w, H5Dwrite(a->dset, a->mem_type, mem_space, file_space, H5P_DEFAULT, data), "cannot write /%s", a->name);
  WCHECK(a->w, H5Sclose(mem_space), "cannot close a dataspace of /%s", a->name);
  WCHECK(a->w, H5Sclose(file_space), "cannot close the dataspace of /%s", a->name);
  a->n = total;
}

void appender_close(h5_appender *a) { WCHECK(a->w, H5Dclose(a->dset), "cannot close /%s", a->name); }

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
