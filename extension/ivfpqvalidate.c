/*
 * vs_ivfpq: operator class validation (amvalidate).  The operator classes have vs_flat's shape
 * (OPERATOR 1 the distance FOR ORDER BY, OPERATOR 2 the optional range test, FUNCTION 1 the
 * metric), so vs_flat's checks apply (flatvalidate.c).
 */
#include "postgres.h"

#include "flat.h"
#include "ivfpq.h"

bool
vs_ivfpq_validate(Oid opclassoid)
{
	return vs_opclass_validate(opclassoid, "vs_ivfpq");
}
