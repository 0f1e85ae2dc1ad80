/*
 * vs_lc and vs_sss: the GPU worker's side of their builds (VS_OP_BUILD, the kinds' build_step),
 * and the backend's calls to it from CREATE INDEX (lcbuild.c, sssbuild.c).  Distance evaluations
 * are all of a build's cost (LC: about n^2 / (2 (bucket_size + 1)); SSS: n per pivot, twice), and
 * the worker's engine computes them on its device (vsearch/metric.h's context builds); the
 * results are exactly the host functions' (vs_lc_build, vs_sss_select, vs_sss_table), so an index
 * built through the worker is the one the backend builds.  Every step carries all the rows
 * (vectors, or the texts' characters as a string request), ids are positions.
 *
 *   VS_METRIC_BUILD_LC    params: bucket_size, seed.  Answer: uint64 ncenters | uint64 centers[n]
 *                         | uint64 members[n] | uint64 bucket_offsets[n + 1] | float8 radii[n]
 *                         (vs_lc_build's arrays; the tails past ncenters unused).
 *   VS_METRIC_SELECT_SSS  params: alpha, max_pivots.  Answer: uint64 npivots | float8 diameter |
 *                         uint64 pivots[max_pivots].
 *   VS_METRIC_TABLE_SSS   params: npivots; payload: uint64 pivots[npivots] (positions).  Answer:
 *                         float4 table[n x npivots], row-major.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"

#include "guc.h"
#include "sss.h"
#include "worker.h"
#include "worker_internal.h"

StaticAssertDecl(sizeof(size_t) == sizeof(uint64), "the engine's size_t arrays travel as uint64");
StaticAssertDecl(sizeof(VsMetricBuildParams) <= sizeof(VsKindParams),
				 "a build step's parameters fit the kind's parameter block");

/* ---- checking requests --------------------------------------------------------------------- */

static Size
answer_bytes(const VsMetricBuildParams *p, Size n)
{
	switch (p->step)
	{
		case VS_METRIC_BUILD_LC:
			return sizeof(uint64) * (1 + n + n + n + 1) + sizeof(double) * n;
		case VS_METRIC_SELECT_SSS:
			return sizeof(uint64) + sizeof(double) + sizeof(uint64) * p->max_pivots;
		default:
			return sizeof(float) * n * p->npivots;
	}
}

bool
vs_metric_check_build(const VsRequest *r, char *why, Size whylen)
{
	VsMetricBuildParams p;
	bool		strings = r->qformat == VS_QUERIES_STRINGS;
	uint64		bytes = r->queries_len;

	memcpy(&p, &r->params, sizeof(p));
	if (strings ? r->metric != VS_METRIC_LEVENSHTEIN
		: (r->metric != VS_METRIC_L2 && r->metric != VS_METRIC_L1))
		snprintf(why, whylen, "vs_lc and vs_sss do not build %s rows under metric %u",
				 strings ? "string" : "vector", r->metric);
	else if (bytes > VS_METRIC_MAX_BUILD_BYTES)
		snprintf(why, whylen, "a vs_lc / vs_sss build step of %llu bytes of rows",
				 (unsigned long long) bytes);
	else if (strings && (bytes < ((uint64) r->nq + 1) * sizeof(uint64) ||
						 (bytes - ((uint64) r->nq + 1) * sizeof(uint64)) % sizeof(uint32) != 0))
		snprintf(why, whylen, "a vs_lc / vs_sss build step's %u string rows in %llu bytes",
				 r->nq, (unsigned long long) bytes);
	else if (p.step == VS_METRIC_BUILD_LC && (p.bucket_size < 1 || r->payload_len != 0))
		snprintf(why, whylen, "invalid vs_lc build (bucket_size %u)", p.bucket_size);
	else if (p.step == VS_METRIC_SELECT_SSS &&
			 (!(p.alpha > 0.0 && p.alpha <= 1.0) || p.max_pivots < 1 ||
			  p.max_pivots > VS_SSS_MAX_PIVOTS || r->payload_len != 0))
		snprintf(why, whylen, "invalid vs_sss pivot selection (alpha %g, max_pivots %u)",
				 p.alpha, p.max_pivots);
	else if (p.step == VS_METRIC_TABLE_SSS &&
			 (p.npivots < 1 || p.npivots > VS_SSS_MAX_PIVOTS ||
			  r->payload_len != sizeof(uint64) * p.npivots ||
			  (uint64) r->nq * p.npivots * sizeof(float) > MaxAllocHugeSize))
		snprintf(why, whylen, "invalid vs_sss table step (%u pivots, %llu bytes of them)",
				 p.npivots, (unsigned long long) r->payload_len);
	else if (r->kind == VS_LC_KIND ? p.step != VS_METRIC_BUILD_LC
			 : (p.step != VS_METRIC_SELECT_SSS && p.step != VS_METRIC_TABLE_SSS))
		snprintf(why, whylen, "build step %u is not one of kind %u", p.step, r->kind);
	else
		return true;
	return false;
}

/* ---- the steps, in the worker -------------------------------------------------------------- */

/*
 * The request's rows as the engine's space.  Vectors are read in place (a backend that writes
 * over them only spoils its own index); strings are copied first and their offsets checked, since
 * they say where the characters are (the caller frees the copies: the worker's result context is
 * never reset).  False with err set when they are malformed.
 */
static bool
request_space(const VsRequest *r, const float *rows, vs_mspace *space, char *err, Size errlen)
{
	memset(space, 0, sizeof(*space));
	space->n = r->nq;
	if (r->qformat == VS_QUERIES_VECTORS)
	{
		space->kind = VS_MSPACE_VECTORS;
		space->metric = (vs_metric) r->metric;
		space->dim = r->dim;
		space->vectors = rows;
		return true;
	}
	else
	{
		Size		noff = ((Size) r->nq + 1) * sizeof(uint64);
		Size		nchars = (r->queries_len - noff) / sizeof(uint32);
		uint64	   *offsets = MemoryContextAllocHuge(CurrentMemoryContext, noff);
		uint32	   *chars = MemoryContextAllocHuge(CurrentMemoryContext,
												   (nchars + 1) * sizeof(uint32));
		bool		ok;

		memcpy(offsets, rows, noff);
		memcpy(chars, (const char *) rows + noff, nchars * sizeof(uint32));
		ok = offsets[0] == 0 && offsets[r->nq] == nchars;
		for (uint32 i = 0; ok && i < r->nq; i++)
			ok = offsets[i + 1] >= offsets[i];
		if (!ok)
		{
			snprintf(err, errlen, "vs_lc / vs_sss build: string rows with malformed offsets");
			pfree(offsets);
			pfree(chars);
			return false;
		}
		space->kind = VS_MSPACE_STRINGS;
		space->metric = VS_METRIC_L2;	/* unused for strings */
		space->offsets = offsets;
		space->chars = chars;
		return true;
	}
}

int
vs_metric_build_step(struct vs_context *engine, const VsRequest *req, const float *rows,
					 const char *payload, char **answer, Size *answer_len, char *err,
					 Size errlen)
{
	VsMetricBuildParams p;
	vs_mspace	space;
	Size		n = req->nq;
	char	   *out;
	int			rc;

	memcpy(&p, &req->params, sizeof(p));
	if (!request_space(req, rows, &space, err, errlen))
		return VS_INVALID_ARGUMENT;
	*answer_len = answer_bytes(&p, n);
	out = MemoryContextAllocHuge(CurrentMemoryContext, *answer_len);
	if (p.step == VS_METRIC_BUILD_LC)
	{
		uint64	   *ncenters = (uint64 *) out;
		size_t	   *centers = (size_t *) (ncenters + 1);
		size_t	   *members = centers + n;
		size_t	   *offsets = members + n;
		double	   *radii = (double *) (offsets + n + 1);

		rc = vs_metric_build_lc(engine, &space, p.bucket_size, p.seed, centers,
								(size_t *) ncenters, members, offsets, radii);
	}
	else if (p.step == VS_METRIC_SELECT_SSS)
	{
		uint64	   *npivots = (uint64 *) out;
		double	   *diameter = (double *) (npivots + 1);
		size_t	   *pivots = (size_t *) (diameter + 1);

		rc = vs_metric_select_sss(engine, &space, p.alpha, p.max_pivots, pivots,
								  (size_t *) npivots, diameter);
	}
	else
	{
		size_t	   *pivots = palloc(sizeof(size_t) * p.npivots);

		/* copied before they are checked (the engine checks that each names a row) */
		memcpy(pivots, payload, sizeof(uint64) * p.npivots);
		rc = vs_metric_table_sss(engine, &space, pivots, p.npivots, (float *) out);
		pfree(pivots);
	}
	if (space.kind == VS_MSPACE_STRINGS)
	{
		/* the copies may be large; the answer stays until it is streamed */
		pfree((void *) space.offsets);
		pfree((void *) space.chars);
	}
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "vs_lc / vs_sss build step %u: %s: %s", p.step,
				 vs_status_name((vs_status) rc), vs_last_error(engine));
		pfree(out);
		return rc;
	}
	*answer = out;
	return VS_OK;
}

/* ---- asking the worker (backends) ---------------------------------------------------------- */

/* The build's rows as a request carries them, and a reference to the index being built. */
static bool
worker_rows(const VsMetricBuild *st, vs_metric metric, VsIndexRef *ref, VsQueries *rows)
{
	Size		bytes;

	if (vs_device_mode == VS_DEVICE_CPU || st->n == 0)
		return false;
	vs_ref_init(st->index, vs_kind_of_index(st->index)->id, ref);
	ref->metric = metric;
	ref->dim = st->dim;
	memset(rows, 0, sizeof(*rows));
	rows->nq = st->n;
	if (st->text)
	{
		rows->offsets = st->offsets;
		rows->chars = st->values;
		bytes = (st->n + 1) * sizeof(uint64) + st->nvalues * sizeof(uint32);
	}
	else
	{
		rows->vectors = (const float *) st->values;
		bytes = st->n * st->dim * sizeof(float);
	}
	if (st->n > VS_MAX_REQUEST_QUERIES || bytes > VS_METRIC_MAX_BUILD_BYTES)
		return vs_worker_decline("the rows are more than the worker accepts for a build");
	return true;
}

static void
step_params(const VsMetricBuildParams *p, VsKindParams *out)
{
	memset(out, 0, sizeof(*out));
	memcpy(out, p, sizeof(*p));
}

bool
vs_metric_worker_lc(const VsMetricBuild *st, vs_metric metric, uint32 bucket_size, uint64 seed,
					size_t *centers, size_t *ncenters, size_t *members, size_t *bucket_offsets,
					double *radii)
{
	VsIndexRef	ref;
	VsQueries	rows;
	VsMetricBuildParams p;
	VsKindParams kp;
	uint64		nc = 0;
	Size		n = st->n;
	VsWorkerBuffer answer[5];

	if (!worker_rows(st, metric, &ref, &rows))
		return false;
	memset(&p, 0, sizeof(p));
	p.step = VS_METRIC_BUILD_LC;
	p.bucket_size = bucket_size;
	p.seed = seed;
	step_params(&p, &kp);
	answer[0] = (VsWorkerBuffer) {&nc, sizeof(uint64)};
	answer[1] = (VsWorkerBuffer) {centers, sizeof(uint64) * n};
	answer[2] = (VsWorkerBuffer) {members, sizeof(uint64) * n};
	answer[3] = (VsWorkerBuffer) {bucket_offsets, sizeof(uint64) * (n + 1)};
	answer[4] = (VsWorkerBuffer) {radii, sizeof(double) * n};
	if (!vs_worker_build(&ref, &kp, &rows, NULL, 0, answer, 5, false))
		return false;
	if (nc < 1 || nc > n || bucket_offsets[0] != 0 || bucket_offsets[nc] != n - nc)
		elog(ERROR, "vsearch worker: a vs_lc build of %zu rows came back with %llu centers",
			 n, (unsigned long long) nc);
	for (uint64 c = 0; c < nc; c++)
		if (centers[c] >= n || bucket_offsets[c + 1] < bucket_offsets[c])
			elog(ERROR, "vsearch worker: a vs_lc build came back malformed");
	for (Size m = 0; m < n - nc; m++)
		if (members[m] >= n)
			elog(ERROR, "vsearch worker: a vs_lc build came back malformed");
	*ncenters = nc;
	return true;
}

bool
vs_metric_worker_select_sss(const VsMetricBuild *st, vs_metric metric, double alpha,
							uint32 max_pivots, size_t *pivots, size_t *npivots, double *diameter)
{
	VsIndexRef	ref;
	VsQueries	rows;
	VsMetricBuildParams p;
	VsKindParams kp;
	uint64		np = 0;
	VsWorkerBuffer answer[3];

	if (!worker_rows(st, metric, &ref, &rows))
		return false;
	memset(&p, 0, sizeof(p));
	p.step = VS_METRIC_SELECT_SSS;
	p.alpha = alpha;
	p.max_pivots = max_pivots;
	step_params(&p, &kp);
	answer[0] = (VsWorkerBuffer) {&np, sizeof(uint64)};
	answer[1] = (VsWorkerBuffer) {diameter, sizeof(double)};
	answer[2] = (VsWorkerBuffer) {pivots, sizeof(uint64) * max_pivots};
	if (!vs_worker_build(&ref, &kp, &rows, NULL, 0, answer, 3, false))
		return false;
	if (np < 1 || np > max_pivots)
		elog(ERROR, "vsearch worker: a vs_sss pivot selection came back with %llu pivots",
			 (unsigned long long) np);
	for (uint64 j = 0; j < np; j++)
		if (pivots[j] >= st->n)
			elog(ERROR, "vsearch worker: a vs_sss pivot selection came back malformed");
	*npivots = np;
	return true;
}

bool
vs_metric_worker_table_sss(const VsMetricBuild *st, vs_metric metric, const size_t *pivots,
						   size_t npivots, float *table)
{
	VsIndexRef	ref;
	VsQueries	rows;
	VsMetricBuildParams p;
	VsKindParams kp;
	VsWorkerBuffer payload;
	VsWorkerBuffer answer;

	if (npivots == 0 || !worker_rows(st, metric, &ref, &rows))
		return false;
	memset(&p, 0, sizeof(p));
	p.step = VS_METRIC_TABLE_SSS;
	p.npivots = (uint32) npivots;
	step_params(&p, &kp);
	payload = (VsWorkerBuffer) {(void *) pivots, sizeof(uint64) * npivots};
	answer = (VsWorkerBuffer) {table, sizeof(float) * st->n * npivots};
	return vs_worker_build(&ref, &kp, &rows, &payload, 1, &answer, 1, false);
}
