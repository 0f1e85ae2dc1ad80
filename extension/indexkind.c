/*
 * The table of index kinds (indexkind.h): one line per access method.
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "lib/stringinfo.h"

#include "indexkind.h"

extern const VsIndexKind vs_flat_kind;	/* flatutils.c */
extern const VsIndexKind vs_ivfpq_kind; /* ivfpqutils.c */
extern const VsIndexKind vs_lc_kind;	/* lcutils.c */
extern const VsIndexKind vs_sss_kind;	/* sssutils.c */
extern const VsIndexKind vs_graph_kind; /* graphutils.c */

static const VsIndexKind *const kinds[] = {
	&vs_flat_kind,
	&vs_ivfpq_kind,
	&vs_lc_kind,
	&vs_sss_kind,
	&vs_graph_kind,
};

const VsIndexKind *
vs_kind_by_id(uint32 id)
{
	for (int i = 0; i < lengthof(kinds); i++)
		if (kinds[i]->id == id)
			return kinds[i];
	return NULL;
}

const VsIndexKind *
vs_kind_by_page_id(uint16 page_id)
{
	for (int i = 0; i < lengthof(kinds); i++)
		if (kinds[i]->page_id == page_id)
			return kinds[i];
	return NULL;
}

/* An index is of a kind when its access method builds with the kind's build function. */
const VsIndexKind *
vs_kind_of_index(Relation index)
{
	if (index->rd_rel->relkind != RELKIND_INDEX || index->rd_indam == NULL)
		return NULL;
	for (int i = 0; i < lengthof(kinds); i++)
		if (index->rd_indam->ambuild == kinds[i]->build)
			return kinds[i];
	return NULL;
}

const VsIndexKind *
vs_ref_kind(const VsIndexRef *ref)
{
	const VsIndexKind *kind = vs_kind_by_id(ref->kind);

	if (kind == NULL)
		elog(ERROR, "unknown vsearch index kind %u", ref->kind);
	return kind;
}

void
vs_kinds_init(void)
{
	for (int i = 0; i < lengthof(kinds); i++)
		if (kinds[i]->init)
			kinds[i]->init();
}

void
vs_kinds_worker_tick(struct vs_context *engine, bool stop)
{
	for (int i = 0; i < lengthof(kinds); i++)
		if (kinds[i]->worker_tick)
			kinds[i]->worker_tick(engine, stop);
}

char *
vs_kind_names(const char *conjunction)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < lengthof(kinds); i++)
		appendStringInfo(&buf, "%s%s", i == 0 ? "" :
						 i + 1 < lengthof(kinds) ? ", " : psprintf(" %s ", conjunction),
						 kinds[i]->name);
	return buf.data;
}
