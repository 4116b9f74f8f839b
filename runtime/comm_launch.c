/* runtime/comm_launch.c — where this process stands in the job, as the
 * launcher's environment says: nnc's own variables first (a scheduler that
 * starts the ranks itself), then Open MPI's, then MPICH's (PMI), else alone. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nnrt_comm.h"

/* An int from variable name, when set: *found says whether it was. */
static nnrt_status env_int(const char *name, int *out, bool *found, nnrt_error *err) {
  const char *v = getenv(name);
  *found = v != NULL;
  if (!v) return NNRT_OK;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || x < INT32_MIN || x > INT32_MAX)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: expected an integer, found \"%s\"", name, v);
  *out = (int)x;
  return NNRT_OK;
}

/* The rank/world/local variables of one launcher, named by prefix-free
 * triples; *found when rank or world is set (both must be). */
static nnrt_status read_triple(const char *rank_var, const char *world_var, const char *local_var,
                               nnrt_comm_launch *l, bool *found, nnrt_error *err) {
  bool has_rank, has_world, has_local;
  nnrt_status s = env_int(rank_var, &l->rank, &has_rank, err);
  if (s == NNRT_OK) s = env_int(world_var, &l->world, &has_world, err);
  if (s == NNRT_OK) s = env_int(local_var, &l->local_rank, &has_local, err);
  if (s != NNRT_OK) return s;
  *found = has_rank || has_world;
  if (!*found) return NNRT_OK;
  if (!has_rank || !has_world)
    return nnrt_errorf(err, NNRT_E_ARG, "%s is set but %s is not: a launch needs both",
                       has_rank ? rank_var : world_var, has_rank ? world_var : rank_var);
  if (l->world < 1)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: expected a world of at least 1 rank, found %d", world_var,
                       l->world);
  if (l->rank < 0 || l->rank >= l->world)
    return nnrt_errorf(err, NNRT_E_ARG, "%s=%d is outside 0..%d (%s=%d)", rank_var, l->rank, l->world - 1,
                       world_var, l->world);
  /* one machine is the common case when a launcher does not say */
  if (!has_local) l->local_rank = l->rank;
  if (l->local_rank < 0)
    return nnrt_errorf(err, NNRT_E_ARG, "%s: expected a local rank of at least 0, found %d", local_var,
                       l->local_rank);
  return NNRT_OK;
}

nnrt_status nnrt_comm_launch_read(nnrt_comm_launch *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_comm_launch_read: out is NULL");
  nnrt_comm_launch l;
  memset(&l, 0, sizeof l);
  l.world = 1;
  l.timeout_s = NNRT_COMM_DEFAULT_TIMEOUT_S;
  bool found = false;
  nnrt_status s = read_triple("NNC_RANK", "NNC_WORLD_SIZE", "NNC_LOCAL_RANK", &l, &found, err);
  if (s == NNRT_OK && !found) {
    s = read_triple("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", &l, &found,
                    err);
    if (s == NNRT_OK && !found) s = read_triple("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", &l, &found, err);
    l.from_mpi = found;
  }
  if (s != NNRT_OK) return s;
  if (!found) l.rank = 0, l.world = 1, l.local_rank = 0;

  const char *r = getenv("NNC_RENDEZVOUS");
  if (r) {
    if (strlen(r) >= sizeof l.rendezvous)
      return nnrt_errorf(err, NNRT_E_ARG, "NNC_RENDEZVOUS: expected a path below %zu bytes, found %zu",
                         sizeof l.rendezvous, strlen(r));
    memcpy(l.rendezvous, r, strlen(r) + 1);
  }
  const char *t = getenv("NNC_COMM_TIMEOUT");
  if (t) {
    char *end = NULL;
    double x = strtod(t, &end);
    if (end == t || *end != '\0' || !isfinite(x) || x <= 0)
      return nnrt_errorf(err, NNRT_E_ARG, "NNC_COMM_TIMEOUT: expected seconds above 0, found \"%s\"", t);
    l.timeout_s = x;
  }
  *out = l;
  return NNRT_OK;
}
