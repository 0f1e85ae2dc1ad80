/*
 * vs_ivfpq: the GPU worker's side of the index kind (indexkind.h): checking requests, and the build
 * steps of CREATE INDEX that the worker runs (VS_OP_BUILD):
 *
 *   VS_IVFPQ_TRAIN   the request's rows are the build's sample; vs_ivfpq_train once (nothing kept)
 *                    answers float4 centroids[lists x dim] | float4 codebooks[2^nbits x dim];
 *   VS_IVFPQ_ENCODE  the rows are a chunk of the table and the payload is the quantizer
 *                    (centroids | codebooks, sent with every chunk: it is small next to the rows,
 *                    and a worker that restarted mid-build needs nothing else); vs_ivfpq_encode
 *                    answers int32 lists[n] | uint8 codes[n x code_size].
 *
 * The backend side, vs_ivfpq_worker_train / _encode, sends them (worker.h, vs_worker_build).
 *
 * Encoders: an engine object per build, made from the quantizer of its first chunk and kept for the
 * next ones.  It is used only when the build id, the parameters and the quantizer bytes all equal
 * the request's, so a stale or mismatched one never is.  The least recently used one makes room;
 * one idle for VS_ENCODER_IDLE_MS is dropped (the build ended or died).
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "ivfpq.h"
#include "vector.h"
#include "vsearch/ivfpq.h"
#include "worker.h"
#include "worker_internal.h"

#define VS_ENCODERS				4
#define VS_ENCODER_IDLE_MS		60000

typedef struct VsEncoder
{
	uint64		build_id;		/* 0: unused */
	vs_ivfpq_params params;
	float	   *quantizer;		/* centroids | codebooks, as received */
	Size		qbytes;
	vs_ivfpq   *ivf;
	TimestampTz last_used;
} VsEncoder;

static VsEncoder encoders[VS_ENCODERS];

/* Bytes of the quantizer: centroids and codebooks. */
static inline uint64
quantizer_bytes(const VsIvfpqBuildParams *p, uint32 dim)
{
	return ((uint64) p->lists + ((uint64) 1 << p->nbits)) * dim * sizeof(float);
}

static void
request_params(const VsRequest *req, VsIvfpqBuildParams *p, vs_ivfpq_params *params)
{
	memcpy(p, &req->params, sizeof(*p));
	memset(params, 0, sizeof(*params));
	params->dim = req->dim;
	params->nlist = p->lists;
	params->m = p->m;
	params->nbits = (int) p->nbits;
	params->metric = (vs_metric) req->metric;
}

/* ---- checking requests --------------------------------------------------------------------- */

bool
vs_ivfpq_check_request(const VsRequest *r, char *why, Size whylen)
{
	VsIvfpqBuildParams p;

	if (r->metric == VS_METRIC_L1)
	{
		snprintf(why, whylen, "vs_ivfpq does not support metric %u (L1)", r->metric);
		return false;
	}
	if (r->op != VS_OP_BUILD)
		return vs_ivfpq_check_search(r, why, whylen);

	memcpy(&p, &r->params, sizeof(p));
	if ((p.step != VS_IVFPQ_TRAIN && p.step != VS_IVFPQ_ENCODE) ||
		p.lists < 1 || p.lists > VS_IVFPQ_MAX_LISTS ||
		(p.nbits != 4 && p.nbits != 8) ||
		p.m < 1 || p.m > r->dim || r->dim % p.m != 0)
		snprintf(why, whylen, "invalid vs_ivfpq build step %u (lists %u, m %u, nbits %u)",
				 p.step, p.lists, p.m, p.nbits);
	else if (p.step == VS_IVFPQ_TRAIN &&
			 (r->nq < p.lists || r->nq < (1u << p.nbits) ||
			  (uint64) r->nq * r->dim * sizeof(float) > VS_IVFPQ_MAX_TRAIN_BYTES ||
			  r->payload_len != 0))
		snprintf(why, whylen, "invalid training request (lists %u, nbits %u, %u x %u sample)",
				 p.lists, p.nbits, r->nq, r->dim);
	else if (p.step == VS_IVFPQ_ENCODE &&
			 (r->nq > VS_IVFPQ_MAX_ENCODE_ROWS ||
			  (uint64) r->nq * r->dim * sizeof(float) + quantizer_bytes(&p, r->dim) >
			  VS_IVFPQ_MAX_ENCODE_BYTES))
		snprintf(why, whylen, "invalid encode request (lists %u, %u x %u rows)",
				 p.lists, r->nq, r->dim);
	else if (p.step == VS_IVFPQ_ENCODE && r->payload_len != quantizer_bytes(&p, r->dim))
		snprintf(why, whylen, "the quantizer has %llu bytes, expected %llu",
				 (unsigned long long) r->payload_len,
				 (unsigned long long) quantizer_bytes(&p, r->dim));
	else
		return true;
	return false;
}

/* ---- encoders ------------------------------------------------------------------------------ */

static void
encoder_drop(struct vs_context *engine, VsEncoder *e)
{
	if (e->ivf && engine)
		vs_ivfpq_destroy(engine, e->ivf);
	if (e->quantizer)
		pfree(e->quantizer);
	memset(e, 0, sizeof(*e));
}

/* Drops the encoders idle for VS_ENCODER_IDLE_MS (all of them when stop is set). */
void
vs_ivfpq_worker_tick(struct vs_context *engine, bool stop)
{
	TimestampTz now = 0;

	for (int i = 0; i < VS_ENCODERS; i++)
	{
		if (encoders[i].build_id == 0)
			continue;
		if (!stop && now == 0)
			now = GetCurrentTimestamp();
		if (stop || TimestampDifferenceExceeds(encoders[i].last_used, now, VS_ENCODER_IDLE_MS))
			encoder_drop(engine, &encoders[i]);
	}
}

/* The encoder of this request's build and quantizer, created when there is none; NULL with *rc. */
static VsEncoder *
encoder_get(struct vs_context *engine, const VsIvfpqBuildParams *p,
			const vs_ivfpq_params *params, const float *quantizer, Size qbytes, int *rc,
			char *err, Size errlen)
{
	uint64		build_id = p->build_id ? p->build_id : 1;
	VsEncoder  *e = NULL;

	for (int i = 0; i < VS_ENCODERS; i++)
	{
		VsEncoder  *c = &encoders[i];

		if (c->build_id != build_id)
			continue;
		if (c->qbytes == qbytes && memcmp(&c->params, params, sizeof(*params)) == 0 &&
			memcmp(c->quantizer, quantizer, qbytes) == 0)
		{
			c->last_used = GetCurrentTimestamp();
			return c;
		}
		encoder_drop(engine, c);	/* the same build with another quantizer: replace it */
	}
	/* a free entry, else the least recently used */
	for (int i = 0; i < VS_ENCODERS; i++)
	{
		if (encoders[i].build_id == 0)
		{
			e = &encoders[i];
			break;
		}
		if (!e || encoders[i].last_used < e->last_used)
			e = &encoders[i];
	}
	encoder_drop(engine, e);
	/* the engine works on a private copy: the backend may rewrite its segment meanwhile */
	e->quantizer = MemoryContextAllocHuge(TopMemoryContext, qbytes);
	memcpy(e->quantizer, quantizer, qbytes);
	e->qbytes = qbytes;
	e->params = *params;
	*rc = vs_ivfpq_create(engine, params, e->quantizer, e->quantizer + (Size) p->lists * params->dim,
						  &e->ivf);
	if (*rc != VS_OK)
	{
		snprintf(err, errlen, "encode: %s: %s", vs_status_name((vs_status) *rc),
				 vs_last_error(engine));
		e->ivf = NULL;
		encoder_drop(engine, e);
		return NULL;
	}
	e->build_id = build_id;
	e->last_used = GetCurrentTimestamp();
	return e;
}

/* ---- the build steps ----------------------------------------------------------------------- */

static int
train_step(struct vs_context *engine, const VsRequest *r, const float *rows, char **answer,
		   Size *answer_len, char *err, Size errlen)
{
	VsIvfpqBuildParams p;
	vs_ivfpq_params params;
	vs_ivfpq_train_params train;
	Size		ncent;
	float	   *out;
	int			rc;

	request_params(r, &p, &params);
	ncent = (Size) p.lists * r->dim;
	vs_ivfpq_train_params_init(&train);
	train.seed = p.seed;
	train.sample_size = 0;		/* the backend drew the sample */
	*answer_len = quantizer_bytes(&p, r->dim);
	out = MemoryContextAllocHuge(CurrentMemoryContext, *answer_len);
	/* the sample is read in place: a backend that scribbles on it only spoils its own index */
	rc = vs_ivfpq_train(engine, &params, &train, rows, r->nq, out, out + ncent);
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "training: %s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(engine));
		pfree(out);
		return rc;
	}
	*answer = (char *) out;
	return VS_OK;
}

static int
encode_step(struct vs_context *engine, const VsRequest *r, const float *rows,
			const char *payload, char **answer, Size *answer_len, char *err, Size errlen)
{
	VsIvfpqBuildParams p;
	vs_ivfpq_params params;
	VsEncoder  *e;
	Size		code_size;
	char	   *out;
	int			rc = VS_OK;

	request_params(r, &p, &params);
	code_size = vs_ivfpq_code_size(&params);
	e = encoder_get(engine, &p, &params, (const float *) payload, (Size) r->payload_len, &rc, err,
					errlen);
	if (e == NULL)
		return rc;
	*answer_len = (Size) r->nq * (sizeof(int32) + code_size);
	out = MemoryContextAllocHuge(CurrentMemoryContext, *answer_len);
	/* the rows are read in place: a backend that scribbles on them only spoils its own index */
	rc = vs_ivfpq_encode(engine, e->ivf, rows, r->nq, (int32_t *) out,
						 (uint8_t *) out + (Size) r->nq * sizeof(int32));
	if (rc != VS_OK)
	{
		snprintf(err, errlen, "encode: %s: %s", vs_status_name((vs_status) rc),
				 vs_last_error(engine));
		pfree(out);
		if (rc == VS_DEVICE_ERROR)
			encoder_drop(engine, e);
		return rc;
	}
	*answer = out;
	return VS_OK;
}

int
vs_ivfpq_build_step(struct vs_context *engine, const VsRequest *req, const float *rows,
					const char *payload, char **answer, Size *answer_len, char *err, Size errlen)
{
	VsIvfpqBuildParams p;

	memcpy(&p, &req->params, sizeof(p));
	if (p.step == VS_IVFPQ_TRAIN)
		return train_step(engine, req, rows, answer, answer_len, err, errlen);
	return encode_step(engine, req, rows, payload, answer, answer_len, err, errlen);
}

/* ---- asking the worker (backends) ---------------------------------------------------------- */

static void
build_params(const vs_ivfpq_params *params, VsIvfpqBuildStep step, uint64 seed, uint64 build_id,
			 VsKindParams *out)
{
	VsIvfpqBuildParams p;

	memset(&p, 0, sizeof(p));
	p.step = step;
	p.lists = (uint32) params->nlist;
	p.m = (uint32) params->m;
	p.nbits = (uint32) params->nbits;
	p.seed = seed;
	p.build_id = build_id;
	memset(out, 0, sizeof(*out));
	memcpy(out, &p, sizeof(p));
}

bool
vs_ivfpq_worker_train(const VsIndexRef *ref, const vs_ivfpq_params *params, uint64 seed,
					  const float *sample, int64 n, float *centroids, float *codebooks)
{
	VsKindParams kp;
	VsWorkerBuffer answer[2];
	VsQueries	qs = vs_vector_queries(sample, (Size) Max(n, 0));

	if (vs_device_mode == VS_DEVICE_CPU || n <= 0)
		return false;
	if (n > VS_MAX_REQUEST_QUERIES ||
		(uint64) n * params->dim * sizeof(float) > VS_IVFPQ_MAX_TRAIN_BYTES)
		return vs_worker_decline("the training sample is larger than the worker accepts");
	build_params(params, VS_IVFPQ_TRAIN, seed, 0, &kp);
	answer[0].data = centroids;
	answer[0].len = sizeof(float) * params->nlist * params->dim;
	answer[1].data = codebooks;
	answer[1].len = sizeof(float) * ((Size) 1 << params->nbits) * params->dim;
	return vs_worker_build(ref, &kp, &qs, NULL, 0, answer, 2, false);
}

bool
vs_ivfpq_worker_encode(const VsIndexRef *ref, const vs_ivfpq_params *params, uint64 build_id,
					   const float *centroids, const float *codebooks, const float *rows, int n,
					   int32 *out_lists, uint8 *out_codes)
{
	VsKindParams kp;
	VsWorkerBuffer payload[2];
	VsWorkerBuffer answer[2];
	VsQueries	qs = vs_vector_queries(rows, Max(n, 0));

	if (vs_device_mode == VS_DEVICE_CPU || n <= 0)
		return false;
	payload[0].data = (void *) centroids;
	payload[0].len = sizeof(float) * params->nlist * params->dim;
	payload[1].data = (void *) codebooks;
	payload[1].len = sizeof(float) * ((Size) 1 << params->nbits) * params->dim;
	if (n > VS_IVFPQ_MAX_ENCODE_ROWS ||
		(uint64) n * params->dim * sizeof(float) + payload[0].len + payload[1].len >
		VS_IVFPQ_MAX_ENCODE_BYTES)
		return vs_worker_decline("the rows and quantizer are larger than the worker accepts");
	build_params(params, VS_IVFPQ_ENCODE, 0, build_id, &kp);
	answer[0].data = out_lists;
	answer[0].len = sizeof(int32) * (Size) n;
	answer[1].data = out_codes;
	answer[1].len = vs_ivfpq_code_size(params) * (Size) n;
	return vs_worker_build(ref, &kp, &qs, payload, 2, answer, 2, true);
}
