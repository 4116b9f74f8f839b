/* runtime/st_check.c — does an open weights file fit the model's manifest?
 *
 * The first problem in manifest order is the error, with a count of the
 * others, so one run tells the user how far off the file is. Tensors the
 * model does not use are fine (checkpoints often carry buffers and heads the
 * model drops) and only listed in the report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_st_impl.h"

static bool same_shape(const nnrt_st_desc *d, const nnrt_st_tensor *t) {
  if (d->rank != t->rank) return false;
  for (int i = 0; i < d->rank; i++)
    if (d->shape[i] != t->shape[i]) return false;
  return true;
}

/* Appends s to report while it fits, leaving room for "..."; false once it
 * no longer does. */
static bool append(char *report, size_t size, size_t *len, const char *s) {
  size_t n = strlen(s);
  if (*len + n + 4 > size) {
    if (*len + 4 <= size) {
      memcpy(report + *len, "...", 4);
      *len += 3;
    }
    return false;
  }
  memcpy(report + *len, s, n + 1);
  *len += n;
  return true;
}

static void write_report(const nnrt_st *st, const bool *used, char *report, size_t size) {
  if (!report || !size) return;
  report[0] = 0;
  int extra = 0;
  for (int i = 0; i < st->n; i++) extra += !used[i];
  if (!extra) return;
  char head[256], show[NNRT_SHOW_MAX];
  snprintf(head, sizeof head, "%s: %d tensor%s not used by the model: ", st->label, extra,
           extra == 1 ? "" : "s");
  size_t len = 0;
  if (!append(report, size, &len, head)) return;
  bool first = true;
  for (int i = 0; i < st->n; i++) {
    if (used[i]) continue;
    if (!first && !append(report, size, &len, ", ")) return;
    if (!append(report, size, &len, nnrt_st_show(st->tensors[i].name, show))) return;
    first = false;
  }
}

/* Messages go through nnrt_errorf, which truncates to the message size. */
static nnrt_status problem(const nnrt_st *st, const nnrt_st_desc *d, const nnrt_st_tensor *t,
                           nnrt_error *e) {
  char show[NNRT_SHOW_MAX], want[NNRT_SHAPE_MAX], got[NNRT_SHAPE_MAX];
  nnrt_st_show(d->name, show);
  nnrt_st_shape_str(d->rank, d->shape, want);
  if (!t)
    return nnrt_errorf(e, NNRT_E_FORMAT, "%s: missing tensor \"%s\" (the model expects %s %s)",
                       st->label, show, nnrt_dtype_name(d->dtype), want);
  nnrt_st_shape_str(t->rank, t->shape, got);
  if (t->dtype != d->dtype && !same_shape(d, t))
    return nnrt_errorf(e, NNRT_E_FORMAT, "%s: tensor \"%s\": expected %s %s, found %s %s",
                       st->label, show, nnrt_dtype_name(d->dtype), want,
                       nnrt_dtype_name(t->dtype), got);
  if (t->dtype != d->dtype)
    return nnrt_errorf(e, NNRT_E_FORMAT, "%s: tensor \"%s\": expected dtype %s, found %s",
                       st->label, show, nnrt_dtype_name(d->dtype), nnrt_dtype_name(t->dtype));
  if (!same_shape(d, t))
    return nnrt_errorf(e, NNRT_E_FORMAT, "%s: tensor \"%s\": expected shape %s, found %s",
                       st->label, show, want, got);
  return NNRT_OK;
}

static nnrt_status check_desc(const nnrt_st_desc *d, int i, nnrt_error *err) {
  if (!d->name) return nnrt_errorf(err, NNRT_E_ARG, "manifest entry %d has no name", i);
  if ((unsigned)d->dtype >= NNRT_DTYPE_COUNT)
    return nnrt_errorf(err, NNRT_E_ARG, "manifest entry %d (%.200s) has an invalid dtype %d", i,
                       d->name, (int)d->dtype);
  if (d->rank < 0 || d->rank > NNRT_MAX_RANK)
    return nnrt_errorf(err, NNRT_E_ARG, "manifest entry %d (%.200s) has rank %d, expected 0..%d",
                       i, d->name, d->rank, NNRT_MAX_RANK);
  return NNRT_OK;
}

nnrt_status nnrt_st_check(const nnrt_st *st, const nnrt_st_desc *manifest, int n, char *report,
                          size_t report_size, nnrt_error *err) {
  if (report && report_size) report[0] = 0;
  if (!st || n < 0 || (n > 0 && !manifest))
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_st_check: st or manifest is NULL, or n < 0");
  for (int i = 0; i < n; i++) {
    nnrt_status rc = check_desc(&manifest[i], i, err);
    if (rc != NNRT_OK) return rc;
  }
  bool *used = calloc(st->n ? (size_t)st->n : 1, sizeof *used);
  if (!used) return nnrt_errorf(err, NNRT_E_NOMEM, "%s: out of memory checking weights", st->label);
  nnrt_error first = {NNRT_OK, ""};
  int problems = 0, missing = 0;
  for (int i = 0; i < n; i++) {
    const nnrt_st_tensor *t = NULL;
    if (nnrt_st_find(st, manifest[i].name, &t, NULL) != NNRT_OK) {
      t = NULL;
      missing++;
    } else {
      used[t - st->tensors] = true;
    }
    nnrt_error e;
    if (problem(st, &manifest[i], t, &e) != NNRT_OK && problems++ == 0) first = e;
  }
  write_report(st, used, report, report_size);
  free(used);
  if (!problems) return NNRT_OK;
  if (problems == 1) return nnrt_errorf(err, NNRT_E_FORMAT, "%s", first.msg);
  return nnrt_errorf(err, NNRT_E_FORMAT, "%s; and %d more problem%s (%d tensor%s missing)",
                     first.msg,
                     problems - 1, problems == 2 ? "" : "s", missing, missing == 1 ? "" : "s");
}
